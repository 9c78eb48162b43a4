"""The built collection and its execution environment definition.

`ansible-galaxy collection build` must carry what users need and nothing of
the development tree; the artifact, installed, must give ansible-builder the
modules' Python and system requirements (introspect), and ee/'s definition
must make a build context (create). Building the image itself needs its base
image from a registry, which this machine cannot reach.
"""

import glob
import os
import subprocess
import tarfile

import pytest
import yaml

from conftest import ROOT, VENV_PYTHON

BIN = os.path.dirname(VENV_PYTHON)
# Nothing of these may be in the artifact: caches at any depth, the development tree at the top.
CACHES = (".pytest_cache", "__pycache__")
DEVELOPMENT = (".build", ".venv", ".ansible", ".ci", ".git", "tests", "molecule", "scripts", "Makefile", "ansible.cfg",
               "requirements-dev.txt", ".gitignore", ".ansible-lint")


def user_env(cwd):
    """What a user's machine sees: none of the checkout's Ansible settings, and a fresh home (in cwd, a directory of
    the test's own) for what the tools keep per user: make test leaves nothing in the user's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["HOME"] = os.path.join(cwd, "home")
    return env


def tool(name, *args, cwd):
    # Outside the checkout, without its ansible.cfg.
    env = user_env(cwd)
    proc = subprocess.run([os.path.join(BIN, name)] + list(args), cwd=cwd, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, "%s %s:\n%s\n%s" % (name, args, proc.stdout, proc.stderr)
    return proc.stdout


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("artifact")
    tool("ansible-galaxy", "collection", "build", "--output-path", str(out), ROOT, cwd=str(out))
    (tarball,) = glob.glob(str(out / "ebpf-xdp-*.tar.gz"))
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    return tarball, names


def test_the_artifact_carries_what_users_need_and_no_development_tree(artifact):
    _tarball, names = artifact
    leaked = sorted(n for n in names if set(n.split("/")) & set(CACHES) or n.endswith(".pyc")
                    or n.split("/")[0] in DEVELOPMENT)
    assert not leaked, leaked
    wanted = [os.path.relpath(p, ROOT) for pattern in (
        "plugins/modules/*.py", "plugins/module_utils/*.py", "plugins/module_utils/*/*.py", "plugins/doc_fragments/*.py",
        "plugins/connection/*.py",
        "plugins/filter/*.py", "roles/*/meta/argument_specs.yml", "roles/*/tasks/main.yml", "playbooks/*.yml",
        "files/bpf/*.bpf.c", "files/bpf/include/*.h") for p in glob.glob(os.path.join(ROOT, pattern))]
    wanted += ["meta/runtime.yml", "meta/execution-environment.yml", "requirements.txt", "bindep.txt",
               "ee/execution-environment.yml", "ee/requirements.yml", "README.md", "MANIFEST.json", "FILES.json"]
    missing = sorted(set(wanted) - set(names))
    assert not missing, missing
    assert len([n for n in names if n.startswith("plugins/modules/") and n.endswith(".py")]) >= 8


def test_galaxy_importer_passes_the_artifact_with_no_warning(artifact, tmp_path):
    """What Galaxy and Automation Hub run on upload. ansible-test and ansible-lint have their own steps in make
    test (sanity, lint), so the importer's runs of them are off; its content checks (docs of every plugin, role
    metadata and READMEs, changelog, file list) are on."""
    tarball, _names = artifact
    config = tmp_path / "galaxy-importer.cfg"
    config.write_text("[galaxy-importer]\nrun_ansible_test = False\nrun_ansible_lint = False\n")
    env = user_env(str(tmp_path))
    env.update(GALAXY_IMPORTER_CONFIG=str(config), PATH=BIN + os.pathsep + env.get("PATH", ""))
    proc = subprocess.run([VENV_PYTHON, "-m", "galaxy_importer.main", tarball], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert "Importer processing completed successfully" in output, output[-5000:]
    complaints = [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not complaints, complaints


def test_introspect_finds_the_modules_requirements_in_the_installed_artifact(artifact, tmp_path):
    tarball, _names = artifact
    collections = tmp_path / "collections"
    tool("ansible-galaxy", "collection", "install", "--force", "-p", str(collections), tarball, cwd=str(tmp_path))
    found = yaml.safe_load(tool("ansible-builder", "introspect", "--sanitize", str(collections), cwd=str(tmp_path)))
    python = [line.split("#")[0].strip() for line in found["python"]]
    system = [line.split("#")[0].strip() for line in found["system"]]
    assert "pyroute2>=0.7" in python, found
    for package in ("libbpf1 [platform:dpkg]", "libbpf [platform:rpm]", "clang", "llvm", "bpftool"):
        assert package in system, (package, found)
    assert all("from collection ebpf.xdp" in line for line in found["python"] + found["system"])


def test_create_writes_a_build_context(tmp_path):
    context = tmp_path / "context"
    tool("ansible-builder", "create", "-f", os.path.join(ROOT, "ee", "execution-environment.yml"),
         "-c", str(context), "--output-filename", "Containerfile", cwd=str(tmp_path))
    containerfile = (context / "Containerfile").read_text()
    definition = yaml.safe_load(open(os.path.join(ROOT, "ee", "execution-environment.yml")))
    assert 'EE_BASE_IMAGE="%s"' % definition["images"]["base_image"]["name"] in containerfile
    assert "ansible-galaxy collection install" in containerfile and "introspect" in containerfile
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert {"name": "ebpf.xdp"} in requirements["collections"]
