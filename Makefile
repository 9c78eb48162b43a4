# make deploy: set-up, then the lab and playbooks/deploy_xdp.yml
# make test:   set-up, then every test (benchmarks once, in smoke mode)
# make docs:   the collection's docs site, .build/docs/build/html/index.html
SHELL := /bin/bash
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.build/collections
export ANSIBLE_FORCE_COLOR ?= 0
PYTEST := $(VENV)/bin/python -m pytest

.PHONY: setup deploy lab-up lab-down vm-up vm-down test test-long test-vm test-debian12 test-debian12-long test-ee unit integration integration-shared integration-quiet benchmark-smoke sanity lint docs docs-lint molecule ee benchmark clean

setup:
	@bash scripts/setup.sh

deploy: setup
	ansible-playbook playbooks/lab_up.yml playbooks/deploy_xdp.yml

lab-up: setup
	ansible-playbook playbooks/lab_up.yml

lab-down: setup
	ansible-playbook playbooks/lab_down.yml

# The lab's VM host (inventory host vm): Debian 12's stock kernel under qemu.
vm-up:
	bash scripts/vm.sh up

vm-down:
	bash scripts/vm.sh down

# Stages, two steps side by side where they share nothing they measure: scripts/test.sh.
test: setup
	bash scripts/test.sh

# The VM host's tests (booted once): over SSH from here, and the kernel-dependent integration tests inside it,
# on Debian 12's 6.1 kernel.
test-vm: setup
	bash scripts/test_vm.sh

# Every integration test on Debian 12's 6.1 kernel (but the few about the controller alone): the VM's tests over
# SSH from here, then the rest inside the VM, booted once (scripts/test_vm.sh --all; not part of make test). Those
# marked long and the files of conftest's DEBIAN12_SECOND_PART in make test-debian12-long (each is to fit in one
# CI run of 90 minutes; README says how far).
test-debian12: setup
	bash scripts/ee.sh
	bash scripts/test_vm.sh --all

test-debian12-long: setup
	bash scripts/test_vm.sh --long

# The execution environment's test (tests/integration/test_ee.py, not part of make test): make ee's image, then
# deploy_xdp.yml through ansible-runner and ansible-navigator in it against the VM host over SSH.
test-ee: setup
	bash scripts/ee.sh
	bash scripts/test_vm.sh --ee

unit:
	$(PYTEST) -q tests/unit

integration: integration-shared integration-quiet

# The integration tests that can share the machine with other work, and those
# marked quiet (they measure rates or timing), with the toolchain target.
# Three workers on two CPUs: a worker waits for its Ansible runs, exporters, Prometheus and the lab's hosts much
# of its time (two of test_xdp_metrics' tests: 65 s of CPU in 143 s), while tests that only start modules keep a CPU busy.
# The modules a test starts directly are forked from an interpreter per Python that imported ansible-core and
# pyroute2 once (--module-start=fork, tests/integration/module_starter.py): CPU of test_faults.py 48.7 s with a
# new interpreter for each run, 33.1 s forked; of test_tc_program.py 36.9 s and 18.0 s.
integration-shared:
	$(PYTEST) -q -rxs --durations=25 --vm=without --module-start=fork -m "not quiet and not long" -n 3 \
		--dist loadfile --no-loadscope-reorder --junitxml=.build/test-logs/integration-shared.xml tests/integration

# The integration tests marked long, which make test leaves out: the rest of the migration's kill and fault
# matrices, the sliced rollouts but one, a later batch's fault, two benchmark runs at once (tests/integration,
# conftest's long marker). make test-debian12-long runs them on Debian 12's kernel.
test-long: setup
	$(PYTEST) -q -rxs --durations=25 --vm=without --module-start=fork -m long -n 3 --dist loadfile \
		--no-loadscope-reorder --junitxml=.build/test-logs/test-long.xml tests/integration

integration-quiet:
	$(PYTEST) -q -rxs --durations=10 --vm=without -m quiet tests/integration
	@bash tests/integration/targets/toolchain/runme.sh 2>.build/toolchain-test.log || { cat .build/toolchain-test.log; exit 1; }

benchmark-smoke: setup
	bash scripts/benchmark.sh --smoke

sanity:
	bash scripts/sanity.sh

# The docs site (antsibull-docs, Sphinx): .build/docs/build/html/index.html.
docs:
	bash scripts/docs.sh

# What Galaxy and docs builds read of the plugins' and roles' documentation (scripts/docs_lint.sh).
docs-lint:
	bash scripts/docs_lint.sh

lint:
	ansible-lint --profile production roles playbooks molecule tests/integration/targets

molecule: setup
	bash scripts/molecule.sh

# The execution environment image (ee/Containerfile; README, "Execution environment"): built only when its
# inputs changed.
ee: setup
	bash scripts/ee.sh

benchmark: setup
	bash scripts/benchmark.sh

clean:
	rm -rf .build tests/output
