"""The role ebpf.xdp.xdp_metrics end to end: a real exporter, real programs, real frames, real scrapes.

Every test has namespaces of its own (conftest Pair) and its own pin root;
the role runs with ansible-playbook against localhost (the exporter in this
machine's namespace, reading every namespace that has pins) or, like the
lab, through the ebpf.xdp.netns connection inside one namespace. Its files
go to a temporary directory, so nothing of the machine's own exporter (if
any) is touched. Programs are attached with ebpf.xdp.xdp_program, frames
sent with ebpf.xdp.xdp_trafficgen, and what the exporter says is compared
with what was sent; promtool (Debian's prometheus package) judges the
exposition, and a real Prometheus server scrapes it once.

Each run of the role costs seconds (some 4.5 s of CPU), so the four-step rhythm is asserted once for each of its
state-changing tasks: installing and starting an exporter (the shared one's, `served`), the web configuration
(TLS), the removal (absent); the textfile mode and the netns connection run the same tasks with another
configuration once (test_lab's rhythm of deploy_xdp.yml takes the lab's exporters through the netns connection).
Tests that only need a running exporter with the defaults and change nothing share `served`; tests of what the
exporter does with other settings (slow clients, the cache) start one from its installation with the command the
role's last task runs (Exporter.start_from), without a run of the role.
"""

import base64
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

import bcrypt
import pytest
import yaml

import test_xdp_filter_twin as twin_test
from conftest import ROOT, SYSTEM_PYTHON, ModuleRunner, Pair, ansible_playbook, sh
from kernel_features import kernel_version

PLAYBOOK = """
- name: The exporter
  hosts: all
  gather_facts: false
  roles:
    - role: ebpf.xdp.xdp_metrics
"""
DASHBOARD = os.path.join(ROOT, "roles", "xdp_metrics", "files", "grafana", "ebpf_xdp.json")


# The role's variables that are the exporter's settings of the same name (roles/xdp_metrics/vars/main.yml,
# __xdp_metrics_config), for Exporter.start_from.
DIRECT_SETTINGS = {"pin_root", "netns", "listen_address", "port", "unmanaged_programs", "cache_seconds",
                   "max_connections", "request_timeout"}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return int(port)


class Exporter:
    """One exporter installed by the role into a directory of its own; the role run as a playbook."""

    def __init__(self, base, pin_root, inventory="localhost,", connection="local", **extra):
        self.base = str(base)
        self.name = "xm-%s" % uuid.uuid4().hex[:6]
        self.port = free_port()
        self.playbook = os.path.join(self.base, "play.yml")
        with open(self.playbook, "w", encoding="utf-8") as out:
            out.write(PLAYBOOK)
        self.inventory, self.connection = inventory, connection
        self.vars = dict({
            "xdp_metrics_service_name": self.name, "xdp_metrics_port": self.port,
            "xdp_metrics_pin_root": pin_root, "xdp_metrics_service_manager": "process",
            "xdp_metrics_install_dir": os.path.join(self.base, "lib"),
            "xdp_metrics_config_dir": os.path.join(self.base, "etc"),
            "xdp_metrics_run_dir": os.path.join(self.base, "run"),
            "xdp_metrics_log_dir": os.path.join(self.base, "log"),
            "xdp_metrics_apt_update_cache": False,
            # The package check is one module run of each role run (seconds in the emulated VM): asserted by
            # the runs that install an exporter from nothing (served, TLS), taken as done by the others.
            "xdp_metrics_install_packages": False,
            # Each scrape a new collection: the tests compare counters before and after frames sent within
            # a second (test_cache_serves_scrapes_within_its_interval has the cache on).
            "xdp_metrics_cache_seconds": 0}, **extra)

    @property
    def pid_file(self):
        return os.path.join(self.base, "run", self.name + ".pid")

    @property
    def config_file(self):
        return os.path.join(self.base, "etc", self.name + ".json")

    def role(self, check=False, expect_ok=True, **extra):
        """ansible-playbook with the role; the json callback's output (and the failure messages)."""
        args = ["-i", self.inventory, self.playbook]
        if self.connection:
            args += ["-c", self.connection, "-e", "ansible_python_interpreter=%s" % SYSTEM_PYTHON]
        return ansible_playbook(*args, check=check, expect_ok=expect_ok, extra_vars=[dict(self.vars, **extra)])

    def command(self):
        """The installed exporter's command line, as the role runs it (__xdp_metrics_command), but --config."""
        return [SYSTEM_PYTHON, "-s", "-E", os.path.join(self.base, "lib", "ebpf_xdp_exporter.py")]

    def start_from(self, installed):
        """This exporter's configuration started from installed's code (an Exporter the role installed) with the
        command the role's last task runs (--ensure), without a run of the role: for the tests of what the
        exporter does, not of what the role does (a run of the role is ~12 module runs, a minute under emulation)."""
        config = {key[len("xdp_metrics_"):]: val for key, val in self.vars.items()
                  if key[len("xdp_metrics_"):] in DIRECT_SETTINGS}
        config.update(service=self.name, pid_file=self.pid_file)
        os.makedirs(os.path.dirname(self.config_file), exist_ok=True)
        with open(self.config_file, "w", encoding="utf-8") as out:
            json.dump(config, out)
        proc = subprocess.run(installed.command() + [
            "--config", self.config_file, "--config-json", json.dumps(config),
            "--log-file", os.path.join(self.base, "log", self.name + ".log"), "--ensure"],
            capture_output=True, text=True, check=False)
        assert proc.returncode == 0 and json.loads(proc.stdout)["action"] == "started", (proc.stdout, proc.stderr,
                                                                                         self.log())

    def rhythm(self, **extra):
        """check -> run -> check -> run: changed, changed, not changed, not changed."""
        outs = [self.role(check=check, **extra) for check in (True, False, True, False)]
        counts = [changed(out) for out in outs]
        assert counts[0] > 0 and counts[1] > 0 and counts[2:] == [0, 0], (counts, changed_tasks(outs[2]),
                                                                          changed_tasks(outs[3]), self.log())
        return counts

    def log(self):
        try:
            with open(os.path.join(self.base, "log", self.name + ".log"), encoding="utf-8") as src:
                return src.read()[-3000:]
        except OSError:
            return ""

    def pid(self):
        try:
            with open(self.pid_file, encoding="ascii") as src:
                pid = int(src.readline())  # the next line names the configuration it serves
        except (OSError, ValueError):
            return None
        return pid if os.path.exists("/proc/%s" % pid) else None

    def scrape(self, host="127.0.0.1"):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open("http://%s:%d/metrics" % (host, self.port), timeout=10) as resp:
            return resp.read().decode()

    def stop(self):
        """Whatever a test left running (the role's absent state is tested on its own)."""
        pid = self.pid()
        if pid:
            os.kill(pid, 15)
            for _attempt in range(100):
                if not os.path.exists("/proc/%s" % pid):
                    break
                time.sleep(0.05)


def changed(out):
    return sum(stats["changed"] for stats in out["stats"].values())


def changed_tasks(out):
    return [task["task"]["name"] for play in out["plays"] for task in play["tasks"]
            if any(result.get("changed") for result in task["hosts"].values())]


def failure_messages(out):
    messages = []
    for play in out["plays"]:
        for task in play["tasks"]:
            for result in task["hosts"].values():
                if result.get("failed"):
                    messages.append(str(result.get("msg")))
    return messages


def only(items):
    assert len(items) == 1, items
    return items[0]


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """[(name, {label: value}, value)] of an exposition (no comments)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, line
        out.append((match.group(1), dict(LABEL.findall(match.group(2) or "")), float(match.group(3))))
    return out


def series(text, name, **labels):
    """{frozenset(labels): value} of the samples of name that carry the given labels."""
    return {frozenset(lab.items()): value for metric, lab, value in parse(text)
            if metric == name and all(lab.get(k) == v for k, v in labels.items())}


def value(text, name, **labels):
    found = series(text, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return next(iter(found.values()))


def promtool_check(text):
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def new_pin_root():
    return "/sys/fs/bpf/ebpf_xdp_test/xm%s" % uuid.uuid4().hex[:8]


@pytest.fixture
def pin_root():
    path = new_pin_root()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def run(pin_root):
    return ModuleRunner(SYSTEM_PYTHON, pin_root)


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="xdp_metrics_")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def exporter(workdir, pin_root):
    exp = Exporter(workdir, pin_root)
    yield exp
    exp.stop()


@pytest.fixture(scope="module")
def served():
    """One exporter for the tests that only read it (each with namespaces of its own, under its pin root),
    installed once by the role's four-step rhythm; what changes an exporter has one of its own."""
    workdir, pin_root = tempfile.mkdtemp(prefix="xdp_metrics_"), new_pin_root()
    exp = Exporter(workdir, pin_root, xdp_metrics_install_packages=True)
    try:
        exp.rhythm()
        assert exp.pid(), "no exporter running after the role"
        yield exp
    finally:
        exp.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(pin_root, ignore_errors=True)


@pytest.fixture
def run_served(served):
    """Modules that pin under the shared exporter's pin root."""
    return ModuleRunner(SYSTEM_PYTHON, served.vars["xdp_metrics_pin_root"])


def attach(run, pair, drop_obj, **extra):
    args = {"interface": "eth0", "netns": pair.rx, "object": drop_obj, "program": "xdp_drop_count", "mode": "native"}
    res = run("xdp_program", dict(args, **extra))
    assert not res.get("failed"), res
    return res


# ---------------------------------------------------------------- counters equal frames sent


def test_scrape_counts_equal_frames_sent(pair, run_served, drop_obj, served):
    run, exporter = run_served, served
    attach(run, pair, drop_obj)
    pid = exporter.pid()
    before = exporter.scrape()
    promtool_check(before)
    assert value(before, "ebpf_xdp_netns_up", netns=pair.rx) == 1
    [info] = series(before, "ebpf_xdp_program_info", netns=pair.rx)
    info = dict(info)
    assert (info["interface"], info["hook"], info["program"], info["mode"], info["owner"]) == (
        "eth0", "xdp", "xdp_drop_count", "native", "ebpf.xdp"), info
    assert int(info["id"]) > 0 and re.fullmatch(r"[0-9a-f]{16}", info["tag"]), info
    assert not series(before, "ebpf_xdp_packets_total", netns=pair.rx), "counted something before any frame"

    sent = pair.burst(run, count=1000, protocols=("udp", "tcp", "icmp"))["sent"]
    assert sent == {"udp": 1000, "tcp": 1000, "icmp": 1000}, sent
    after = exporter.scrape()
    promtool_check(after)
    for proto, count in sent.items():
        assert value(after, "ebpf_xdp_packets_total", netns=pair.rx, interface="eth0", hook="xdp",
                     program="xdp_drop_count", map="proto_count", proto=proto) == count
    # The receiving veth counts what its XDP program dropped as received.
    rx_before = value(before, "ebpf_xdp_network_receive_packets_total", netns=pair.rx, interface="eth0")
    assert value(after, "ebpf_xdp_network_receive_packets_total", netns=pair.rx, interface="eth0") - rx_before == 3000
    assert value(after, "ebpf_xdp_collect_duration_seconds") > 0
    assert exporter.pid() == pid


# ---------------------------------------------------------------- detach, upgrade, remove: never a crash


def test_exporter_keeps_serving_while_programs_come_and_go(pair, run, drop_obj, exporter):
    attach(run, pair, drop_obj)
    exporter.role()
    pid = exporter.pid()
    pair.burst(run, count=100, protocols=("udp",))
    first = exporter.scrape()
    old_id = dict(next(iter(series(first, "ebpf_xdp_program_info", netns=pair.rx))))["id"]
    assert value(first, "ebpf_xdp_packets_total", netns=pair.rx, proto="udp") == 100

    # Upgrade: another program in its place (count and pass), the pinned maps reused: the counter series
    # continues under the same labels, the info series names the new id.
    res = attach(run, pair, drop_obj, constants={"xdp_action": 2})
    assert res["changed"], res
    upgraded = exporter.scrape()
    new_id = dict(next(iter(series(upgraded, "ebpf_xdp_program_info", netns=pair.rx))))["id"]
    assert new_id != old_id
    assert value(upgraded, "ebpf_xdp_packets_total", netns=pair.rx, proto="udp") == 100
    pair.burst(run, count=100, protocols=("udp",))
    assert value(exporter.scrape(), "ebpf_xdp_packets_total", netns=pair.rx, proto="udp") == 200

    # Detached: its series disappear, the namespace is still read.
    assert run("xdp_program", {"interface": "eth0", "netns": pair.rx, "state": "absent"})["changed"]
    detached = exporter.scrape()
    promtool_check(detached)
    assert not series(detached, "ebpf_xdp_program_info", netns=pair.rx)
    assert not series(detached, "ebpf_xdp_packets_total", netns=pair.rx)

    # A foreign program (ip link, no record) in a namespace the exporter is told to read: left out by
    # default, with its interface; shown as owner unmanaged when asked for. A new list of namespaces is a
    # new configuration: the role restarts the exporter.
    attach(run, pair, drop_obj)
    sh("ip", "-n", pair.tx, "link", "set", "dev", "eth0", "xdpgeneric", "obj", drop_obj, "sec", "xdp")
    exporter.role(xdp_metrics_netns=[pair.rx, pair.tx])
    restarted = exporter.pid()
    assert restarted and restarted != pid
    own = exporter.scrape()
    assert value(own, "ebpf_xdp_netns_up", netns=pair.tx) == 1
    assert not series(own, "ebpf_xdp_program_info", netns=pair.tx)
    assert not series(own, "ebpf_xdp_network_receive_packets_total", netns=pair.tx)
    assert series(own, "ebpf_xdp_program_info", netns=pair.rx)
    exporter.vars["xdp_metrics_unmanaged_programs"] = True
    exporter.role(xdp_metrics_netns=[pair.rx, pair.tx])
    restarted = exporter.pid()
    both = exporter.scrape()
    foreign = dict(next(iter(series(both, "ebpf_xdp_program_info", netns=pair.tx))))
    assert (foreign["owner"], foreign["mode"], foreign["program"]) == ("unmanaged", "generic", "xdp_drop_count")
    assert dict(next(iter(series(both, "ebpf_xdp_program_info", netns=pair.rx))))["owner"] == "ebpf.xdp"

    # The namespaces removed under it (programs, pins and all): their series go, the exporter stays.
    pair.down()
    gone = exporter.scrape()
    promtool_check(gone)
    assert not series(gone, "ebpf_xdp_program_info", netns=pair.rx)
    assert not series(gone, "ebpf_xdp_netns_up", netns=pair.tx)
    assert exporter.pid() == restarted
    assert changed(exporter.role(xdp_metrics_netns=[pair.rx, pair.tx])) == 0


def test_ensure_keeps_only_an_exporter_that_serves_the_configuration_asked_for(pair, exporter):
    """Two runs of the role for one service at once (two benchmark runs on one host): run 1 writes its
    configuration, run 2 writes its own and starts the exporter with it, then run 1's --ensure comes. Its pid
    file was newer than the configuration file, so the exporter was kept: run 1 went on with run 2's exporter
    and configuration, silently. Now --ensure is given what its run wrote and refuses; and an exporter that
    serves another configuration than the one asked for is restarted, whatever the files' times say."""
    exporter.role(xdp_metrics_netns=[pair.rx])
    with open(exporter.config_file, encoding="utf-8") as src:
        written = src.read()
    first = json.loads(written)
    exporter.role(xdp_metrics_netns=[pair.rx, pair.tx])  # the other run
    other = exporter.pid()
    cli = exporter.command() + [
        "--config", exporter.config_file, "--log-file", os.path.join(exporter.base, "log", "cli.log"), "--ensure"]
    proc = subprocess.run(cli + ["--config-json", json.dumps(first)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert re.fullmatch(
        r"ebpf_xdp_exporter: %s is not the configuration this run wrote: it holds another configuration "
        r"\(sha256:[0-9a-f]{64}, this run's sha256:[0-9a-f]{64}\)\. Another run for the service %s wrote it since "
        r"\(two runs at once\?\), or it was edited; nothing was started or stopped\. Run again once the other run "
        r"is over\.\n" % (re.escape(exporter.config_file), exporter.name), proc.stderr), proc.stderr
    assert exporter.pid() == other and value(exporter.scrape(), "ebpf_xdp_netns_up", netns=pair.tx) == 1

    # The first configuration back in the file with an older time than the running exporter's start (copied
    # with its time, `cp -p`): served by another process now, though nothing is newer than it.
    with open(exporter.config_file, "w", encoding="utf-8") as out:
        out.write(written)
    started = os.stat(exporter.pid_file).st_mtime
    os.utime(exporter.config_file, (started - 60, started - 60))
    proc = subprocess.run(cli, capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout)
    assert result["action"] == "restarted" and result["pid"] == exporter.pid() != other, (result, exporter.log())
    page = exporter.scrape()
    assert {dict(k)["netns"] for k in series(page, "ebpf_xdp_netns_up")} == {pair.rx}, page
    assert changed(exporter.role(xdp_metrics_netns=[pair.rx])) == 0


# ---------------------------------------------------------------- facing a network: slow clients, the cap, the cache


def hold(port, count, data=b"GET /metrics HTTP/1.1\r\nHost: slow\r\n"):
    """count connections that begin a request and never finish it."""
    socks = []
    for _connection in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(data)
        socks.append(sock)
    return socks


def closed_by_server(sock, wait):
    """Whether the server closed sock within wait seconds (what it sent before is skipped)."""
    sock.settimeout(wait)
    try:
        while sock.recv(4096):
            pass
    except socket.timeout:
        return False
    except OSError:
        return True
    return True


def test_slow_clients_do_not_delay_a_scrape_and_are_cut_at_their_deadline(pair, run, drop_obj, workdir, pin_root,
                                                                          served):
    exp = Exporter(workdir, pin_root, xdp_metrics_request_timeout=3, xdp_metrics_max_connections=12)
    try:
        attach(run, pair, drop_obj)
        exp.start_from(served)
        exp.scrape()  # the first collection imports the module_utils: not what is measured here
        slow = hold(exp.port, 10)
        began = time.monotonic()
        page = exp.scrape()
        took = time.monotonic() - began
        # Served one at a time, this scrape waited for each slow client's timeout (10 x 3 s).
        assert took < 1.5, took
        assert value(page, "ebpf_xdp_netns_up", netns=pair.rx) == 1

        # A client that keeps trickling bytes is cut off at its deadline all the same (a per-read timeout
        # would never fire), and so are the ten.
        trickle = hold(exp.port, 1)[0]
        began = time.monotonic()
        while time.monotonic() - began < 8:
            try:
                trickle.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
            if closed_by_server(trickle, 0.5):
                break
        cut_after = time.monotonic() - began
        assert 2.5 <= cut_after < 4.5, cut_after
        assert all(closed_by_server(sock, 2) for sock in slow)

        # The cap: 12 connections held, the 13th is answered 503 at once; a slot freed serves again. (The
        # threads of the connections cut above end soon after, not at once: until all 12 are held, again.)
        for _attempt in range(20):
            held = hold(exp.port, 12)
            time.sleep(0.2)  # accepted by the server
            if not any(closed_by_server(sock, 0.05) for sock in held):
                break
            for sock in held:
                sock.close()
            time.sleep(0.5)
        began = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as refused:
            exp.scrape()
        assert refused.value.code == 503 and time.monotonic() - began < 1, refused.value
        held.pop().close()
        time.sleep(0.2)
        assert "ebpf_xdp_exporter_info" in exp.scrape()
        for sock in slow + held + [trickle]:
            sock.close()
    finally:
        exp.stop()


def test_cache_serves_scrapes_within_its_interval(pair, run, drop_obj, workdir, pin_root, served):
    exp = Exporter(workdir, pin_root, xdp_metrics_cache_seconds=4)
    try:
        attach(run, pair, drop_obj)
        exp.start_from(served)
        pair.burst(run, count=100, protocols=("udp",))
        time.sleep(4)  # --ensure's own scrape is out of the cache
        pages = []
        scrapers = [threading.Thread(target=lambda: pages.append(exp.scrape())) for _scraper in range(8)]
        for scraper in scrapers:
            scraper.start()
        for scraper in scrapers:
            scraper.join()
        # One collection for all eight: the same collect duration to the microsecond, the same counters.
        durations = {value(page, "ebpf_xdp_collect_duration_seconds") for page in pages}
        assert len(pages) == 8 and len(durations) == 1, durations
        assert {value(page, "ebpf_xdp_packets_total", netns=pair.rx, proto="udp") for page in pages} == {100}
        # Frames sent now show only once the cached page is older than the interval.
        pair.burst(run, count=50, protocols=("udp",))
        cached = exp.scrape()
        assert value(cached, "ebpf_xdp_collect_duration_seconds") in durations
        assert value(cached, "ebpf_xdp_packets_total", netns=pair.rx, proto="udp") == 100
        time.sleep(4)
        assert value(exp.scrape(), "ebpf_xdp_packets_total", netns=pair.rx, proto="udp") == 150
    finally:
        exp.stop()


@pytest.mark.debian12("xdp_metrics")
def test_default_cache_shows_a_program_attached_after_the_exporter_started(pair, run, drop_obj, workdir, pin_root):
    # The role's defaults (cache_seconds 1) and an exporter that has served pages before the attach, as in the
    # benchmark: a page older than its interval is never served again.
    exp = Exporter(workdir, pin_root)
    del exp.vars["xdp_metrics_cache_seconds"]
    try:
        exp.role()
        assert not series(exp.scrape(), "ebpf_xdp_program_info", netns=pair.rx)
        attach(run, pair, drop_obj)
        time.sleep(1.5)
        page = exp.scrape()
        assert series(page, "ebpf_xdp_program_info", netns=pair.rx), (page, exp.log())
    finally:
        exp.stop()


def test_no_page_older_than_the_cache_interval_while_scrapers_ask_and_programs_come_and_go(
        pair, run, drop_obj, workdir, pin_root, served):
    """Three scrapers asking all the time, as several Prometheus servers would, while a program is attached
    and detached twice with the default cache (1 s): every page asked for more than 1 s after an attach or a
    detach ended, and before the next began, shows the host as it then was."""
    exp = Exporter(workdir, pin_root, xdp_metrics_netns=[pair.rx])
    del exp.vars["xdp_metrics_cache_seconds"]
    pages, stop = [], threading.Event()

    def scraper():
        while not stop.is_set():
            asked = time.monotonic()
            page = exp.scrape()
            pages.append((asked, time.monotonic(), len(series(page, "ebpf_xdp_program_info", netns=pair.rx))))
            time.sleep(0.05)

    scrapers = [threading.Thread(target=scraper) for _scraper in range(3)]
    changes = []  # (began, ended, programs attached after it)
    try:
        exp.start_from(served)
        for thread in scrapers:
            thread.start()
        for _round in range(2):
            began = time.monotonic()
            attach(run, pair, drop_obj)
            changes.append((began, time.monotonic(), 1))
            time.sleep(2)
            began = time.monotonic()
            assert run("xdp_program", {"interface": "eth0", "netns": pair.rx, "state": "absent"})["changed"]
            changes.append((began, time.monotonic(), 0))
            time.sleep(2)
    finally:
        stop.set()
        for thread in scrapers:
            if thread.ident:
                thread.join()
        exp.stop()
    changes.append((float("inf"), None, None))
    judged, stale = 0, []
    for asked, answered, shown in pages:
        for (_began, ended, programs), (following, _ended, _programs) in zip(changes, changes[1:]):
            # Known: from the end of a change to the start of the next. The page may be up to 1 s old.
            if ended + 1.0 < asked and answered < following:
                judged += 1
                if shown != programs:
                    stale.append((round(asked - ended, 3), shown, programs))
    assert judged > 20 and not stale, (judged, stale, exp.log())


# ---------------------------------------------------------------- bad configurations


def test_port_in_use_is_a_clear_error_and_changes_nothing_and_absent_removes_it(exporter):
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", exporter.port))
        other.listen()
        out = exporter.role(expect_ok=False)
        message = only(failure_messages(out))
        assert "cannot listen on 127.0.0.1:%d: the port is in use by another process" % exporter.port in message
        assert not os.path.exists(exporter.config_file) and not exporter.pid()

        # A running exporter asked to move onto the busy port: refused before anything changes.
        busy, exporter.port = exporter.port, free_port()
        exporter.vars["xdp_metrics_port"] = exporter.port
        exporter.role()
        pid = exporter.pid()
        with open(exporter.config_file, encoding="utf-8") as src:
            config = src.read()
        out = exporter.role(expect_ok=False, xdp_metrics_port=busy)
        assert "the port is in use by another process" in failure_messages(out)[0]
        with open(exporter.config_file, encoding="utf-8") as src:
            assert src.read() == config
        assert exporter.pid() == pid
        assert "ebpf_xdp_exporter_info" in exporter.scrape()

    # state absent: stopped, its files gone; the four-step rhythm.
    exporter.rhythm(xdp_metrics_state="absent")
    assert not os.path.exists("/proc/%s" % pid) and not exporter.pid()
    assert not os.path.exists(exporter.config_file) and not os.path.exists(os.path.join(exporter.base, "lib"))
    with pytest.raises(OSError):
        exporter.scrape()


def test_pin_root_without_bpffs_is_a_clear_error(workdir, exporter):
    root = os.path.join(workdir, "not_bpffs", "ebpf_xdp")
    out = exporter.role(expect_ok=False, xdp_metrics_pin_root=root)
    message = only(failure_messages(out))
    assert "%s is not on a BPF filesystem (bpffs)" % root in message, message
    assert not os.path.exists(exporter.config_file) and not exporter.pid()


def test_bad_role_arguments_are_refused(exporter):
    out = exporter.role(expect_ok=False, xdp_metrics_mode="push")
    message = only(failure_messages(out))
    assert "xdp_metrics_mode" in message and "push" in message, message


# ---------------------------------------------------------------- textfile mode


def test_textfile_mode_writes_a_file_promtool_accepts(pair, run, drop_obj, workdir, pin_root):
    textdir = os.path.join(workdir, "textfile")
    os.makedirs(textdir)
    exp = Exporter(workdir, pin_root, xdp_metrics_mode="textfile", xdp_metrics_textfile_dir=textdir,
                   xdp_metrics_textfile_interval=0.5)
    try:
        attach(run, pair, drop_obj)
        assert changed(exp.role()) > 0
        path = os.path.join(textdir, exp.name + ".prom")
        pair.burst(run, count=300, protocols=("tcp",))
        # Not a timed test: in the emulated VM beside test_lab.py's namespaces a collection takes seconds.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(path, encoding="utf-8") as src:
                text = src.read()
            if series(text, "ebpf_xdp_packets_total", netns=pair.rx, proto="tcp"):
                break
            time.sleep(0.2)
        assert value(text, "ebpf_xdp_packets_total", netns=pair.rx, proto="tcp") == 300, (text[-2000:], exp.log())
        proc = subprocess.run(["promtool", "check", "metrics"], stdin=open(path, "rb"), capture_output=True,
                              check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert os.listdir(textdir) == [exp.name + ".prom"]  # the temporary files were renamed, none left
        exp.role(xdp_metrics_state="absent")
        assert not os.path.exists(path)
    finally:
        exp.stop()


# ---------------------------------------------------------------- the lab's way: one exporter per namespace


def test_exporter_in_a_namespace_serves_its_loopback_and_leaves_with_it(pair, run, drop_obj, workdir, pin_root):
    """Through the netns connection, like inventories/lab: the exporter runs inside the host's namespace."""
    inventory = os.path.join(workdir, "hosts.yml")
    with open(inventory, "w", encoding="utf-8") as out:
        yaml.safe_dump({"all": {"hosts": {pair.rx: {"ansible_connection": "ebpf.xdp.netns",
                                                    "ansible_python_interpreter": SYSTEM_PYTHON}}}}, out)
    exp = Exporter(workdir, pin_root, inventory=inventory, connection=None, xdp_metrics_netns=[pair.rx])
    try:
        attach(run, pair, drop_obj)
        assert changed(exp.role()) > 0
        pid = exp.pid()
        pair.burst(run, count=200, protocols=("udp",))
        # Python, not curl: the Debian 12 VM's image has no curl.
        text = sh("ip", "netns", "exec", pair.rx, SYSTEM_PYTHON, "-c",
                  "import sys, urllib.request as u; sys.stdout.write(u.build_opener(u.ProxyHandler({}))"
                  ".open('http://127.0.0.1:%d/metrics', timeout=10).read().decode())" % exp.port).stdout
        assert value(text, "ebpf_xdp_packets_total", netns=pair.rx, proto="udp") == 200
        assert {dict(k)["netns"] for k in series(text, "ebpf_xdp_netns_up")} == {pair.rx}
        with pytest.raises(OSError):
            exp.scrape()  # loopback of the namespace, not of this machine
        sh("ip", "netns", "del", pair.rx)
        deadline = time.monotonic() + 15
        while os.path.exists("/proc/%s" % pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not os.path.exists("/proc/%s" % pid), "the exporter outlived its namespace"
    finally:
        exp.stop()


# ---------------------------------------------------------------- a real Prometheus


def prometheus_sees(workdir, job, query, expected):
    """A real Prometheus (Debian's) scraping with the scrape config job every second: the answer to query once
    it is expected (or the last one after 30 s), and the job's one target."""
    web = free_port()
    os.makedirs(workdir, exist_ok=True)
    config = os.path.join(workdir, "prometheus.yml")
    with open(config, "w", encoding="utf-8") as out:
        yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [dict({"job_name": "ebpf_xdp"}, **job)]},
                       out)
    server = subprocess.Popen(["prometheus", "--config.file=" + config, "--storage.tsdb.path=" + workdir + "/tsdb",
                               "--web.listen-address=127.0.0.1:%d" % web], stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(workdir, "prometheus.log"), "wb"))
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (web, urllib.request.quote(query))
        result, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with opener.open(url, timeout=5) as resp:
                    result = json.load(resp)["data"]["result"]
            except OSError:
                result = []
            if result and float(result[0]["value"][1]) == expected:
                break
            time.sleep(0.5)
        with opener.open("http://127.0.0.1:%d/api/v1/targets" % web, timeout=5) as resp:
            [target] = json.load(resp)["data"]["activeTargets"]
        return result, target
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_prometheus_scrapes_the_counters(pair, run_served, drop_obj, served, workdir):
    run, exporter = run_served, served
    attach(run, pair, drop_obj)
    sent = pair.burst(run, count=5000, protocols=("udp",))["sent"]["udp"]
    query = 'sum(ebpf_xdp_packets_total{netns="%s",proto="udp"})' % pair.rx
    result, target = prometheus_sees(workdir, {"static_configs": [{"targets": ["127.0.0.1:%d" % exporter.port]}]},
                                     query, sent)
    assert result and float(result[0]["value"][1]) == sent, result
    assert target["health"] == "up", target


def test_prometheus_sees_the_struct_fields_of_xdp_filters_statistics(pair, run_served, served, workdir):
    """A program this collection did not write, deployed by it: xdp-tools' xdpfilt_alw_udp attached with
    xdp_program, its rule written with bpf_map_entry; xdp_stats_map's struct xdp_stats_record fields per XDP
    action as ebpf_xdp_map_value, equal to what `xdp-filter status` prints for the same frames through
    xdp-filter itself on a twin pair (whose program, not ours, is not exported by default), and seen by a
    real Prometheus."""
    run, exporter = run_served, served
    twin = Pair()
    twin.up()
    try:
        for each in (pair, twin):
            twin_test.quiet(each)
        rule_path = twin_test.deploy(run, pair, "xdpfilt_alw_udp", "xdp_program")
        rule = run("bpf_map_entry", dict(path=rule_path, entries=[{"key": twin_test.PORT_KEY, "value": twin_test.RULE}]))
        assert rule["changed"] and not rule.get("failed"), rule
        twin_test.send(run, pair)
        with twin_test.xdp_filter_on(twin, "xdpfilt_alw_udp"):
            twin_test.send(run, twin)
            theirs, _program, _hits = twin_test.status(twin.rx)
            page = exporter.scrape()
        promtool_check(page)
        assert not series(page, "ebpf_xdp_program_info", netns=twin.rx), "xdp-filter's own program is not ours"
    finally:
        twin.down()
    mine = dict(netns=pair.rx, interface="eth0", hook="xdp", program="xdpfilt_alw_udp", map="xdp_stats_map")
    for number, action in enumerate(twin_test.PRINTED):
        packets, kib = theirs[action]
        assert series(page, "ebpf_xdp_map_value", field="rx_packets", key=str(number), **mine) == (
            {} if not packets else {frozenset(dict(mine, field="rx_packets", key=str(number), attachment="").items()):
                                    packets}), (action, theirs)
        if packets:
            assert value(page, "ebpf_xdp_map_value", field="rx_bytes", key=str(number), **mine) // 1024 == kib
    assert value(page, "ebpf_xdp_map_value", field="packets", key="1", **mine) == 30
    assert value(page, "ebpf_xdp_map_entries_read", **mine) == 5
    assert value(page, "ebpf_xdp_map_truncated", **mine) == 0
    assert value(page, "ebpf_xdp_map_series_dropped", **mine) == 0
    # filter_ports (a per-CPU array of 64-bit values) stays a counter map, as before: one port has a rule.
    ports = {name: label for name, label in mine.items() if name != "map"}
    ports["map"] = "filter_ports"
    assert value(page, "ebpf_xdp_map_entry_keys", **ports) == 1
    assert not series(page, "ebpf_xdp_map_value", map="filter_ports")

    query = 'ebpf_xdp_map_value{netns="%s",map="xdp_stats_map",field="rx_packets",key="1"}' % pair.rx
    result, target = prometheus_sees(workdir, {"static_configs": [{"targets": ["127.0.0.1:%d" % exporter.port]}]},
                                     query, 30)
    assert result and float(result[0]["value"][1]) == 30 and result[0]["metric"]["program"] == "xdpfilt_alw_udp", \
        result
    assert target["health"] == "up", target


# ---------------------------------------------------------------- TLS, client certificates, basic auth


def make_pki(directory):
    """A throwaway CA with a server certificate (localhost, 127.0.0.1) and a client certificate, and a second
    CA with a client certificate of its own (the wrong one): {name: path}."""
    paths = {}

    def openssl(*args):
        sh("openssl", *args)

    for ca in ("ca", "other_ca"):
        paths[ca] = os.path.join(directory, ca + ".pem")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
                "-subj", "/CN=%s" % ca, "-keyout", os.path.join(directory, ca + ".key"), "-out", paths[ca])
    for name, ca, san in (("server", "ca", "DNS:localhost,IP:127.0.0.1"), ("client", "ca", "DNS:prometheus"),
                          ("wrong_client", "other_ca", "DNS:prometheus")):
        key, csr = os.path.join(directory, name + ".key"), os.path.join(directory, name + ".csr")
        ext = os.path.join(directory, name + ".ext")
        with open(ext, "w", encoding="ascii") as out:
            out.write("subjectAltName=%s\n" % san)
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=%s" % name,
                "-keyout", key, "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", paths[ca], "-CAkey", os.path.join(directory, ca + ".key"),
                "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", os.path.join(directory, name + ".pem"))
        paths[name], paths[name + "_key"] = os.path.join(directory, name + ".pem"), key
    return paths


def https_get(exporter, pki, user=None, password=None, client=None):
    """GET /metrics over TLS, verifying the server against the throwaway CA: (status, body)."""
    context = ssl.create_default_context(cafile=pki["ca"])
    if client:
        context.load_cert_chain(pki[client], pki[client + "_key"])
    request = urllib.request.Request("https://localhost:%d/metrics" % exporter.port)
    if user is not None:
        token = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        request.add_header("Authorization", "Basic " + token)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def test_prometheus_scrapes_over_tls_with_basic_auth(pair, run, drop_obj, workdir, pin_root):
    pki = make_pki(workdir)
    hashed = bcrypt.hashpw(b"scrape-secret", bcrypt.gensalt(10)).decode()
    web_config = {"tls_server_config": {"cert_file": pki["server"], "key_file": pki["server_key"]},
                  "basic_auth_users": {"prometheus": hashed},
                  "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}}}
    exp = Exporter(workdir, pin_root, xdp_metrics_web_config=web_config, xdp_metrics_install_packages=True)
    try:
        attach(run, pair, drop_obj)
        exp.rhythm()
        pid = exp.pid()
        web_file = os.path.join(exp.base, "etc", exp.name + ".web.yml")
        assert os.stat(web_file).st_mode & 0o777 == 0o600  # bcrypt hashes are secrets too

        # No credentials, a wrong password, an unknown user: 401 asking for basic auth. Plain HTTP: no answer.
        for user, password in ((None, None), ("prometheus", "wrong"), ("nobody", "scrape-secret")):
            status, headers = https_get(exp, pki, user, password)
            assert status == 401 and headers["WWW-Authenticate"] == "Basic", (user, status, headers)
        with pytest.raises(OSError):
            exp.scrape()
        status, page = https_get(exp, pki, "prometheus", "scrape-secret")
        assert status == 200 and value(page, "ebpf_xdp_netns_up", netns=pair.rx) == 1

        sent = pair.burst(run, count=2000, protocols=("udp",))["sent"]["udp"]
        with open(os.path.join(workdir, "password"), "w", encoding="ascii") as out:
            out.write("scrape-secret")
        job = {"scheme": "https", "static_configs": [{"targets": ["127.0.0.1:%d" % exp.port]}],
               "tls_config": {"ca_file": pki["ca"], "server_name": "localhost"},
               "basic_auth": {"username": "prometheus", "password_file": os.path.join(workdir, "password")}}
        query = 'sum(ebpf_xdp_packets_total{netns="%s",proto="udp"})' % pair.rx
        result, target = prometheus_sees(workdir, job, query, sent)
        assert result and float(result[0]["value"][1]) == sent, (result, target)
        assert target["health"] == "up" and target["scrapeUrl"].startswith("https://"), target
        # Without credentials Prometheus is refused.
        del job["basic_auth"]
        _result, target = prometheus_sees(os.path.join(workdir, "no_auth"), job, "up", 0)
        assert target["health"] == "down" and "401" in target["lastError"], target

        # Client certificates: the file is read again (no restart); a certificate of another CA, or none, is
        # refused in the handshake, the right one (with the password) is served.
        web_config["tls_server_config"].update(client_ca_file=pki["ca"], client_auth_type="RequireAndVerifyClientCert")
        exp.role(xdp_metrics_web_config=web_config)
        assert exp.pid() == pid
        for client in (None, "wrong_client"):
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                https_get(exp, pki, "prometheus", "scrape-secret", client=client)
        status, page = https_get(exp, pki, "prometheus", "scrape-secret", client="client")
        assert status == 200 and "ebpf_xdp_exporter_info" in page
        assert changed(exp.role(xdp_metrics_web_config=web_config)) == 0
    finally:
        exp.stop()


BAD_WEB_CONFIGS = [
    ({"basic_auth_users": {"prometheus": "plain-password"}}, "basic_auth_users.prometheus is not a bcrypt hash"),
    ({"tls_server_config": {"cert_file": "/nonexistent/cert.pem", "key_file": "/nonexistent/key.pem"}},
     "cannot load cert_file /nonexistent/cert.pem"),
    ({"tls_server_config": {"cert_file": "c.pem", "key_file": "k.pem", "client_auth_type": "RequireAnyClientCert"}},
     "client_auth_type RequireAnyClientCert is not supported"),
    ({"rate_limit": {"burst": 1}}, "rate_limit is not supported by this exporter"),
]


def test_bad_web_configurations_are_refused_and_change_nothing(served):
    """The role stops on the first (nothing written, the running exporter left alone); what it stops on is the
    exporter's check of the web configuration (the role's "Check the configuration on the host" task), which says
    what is wrong with each of the others."""
    exporter = served
    pid = exporter.pid()
    with open(exporter.config_file, encoding="utf-8") as src:
        config = src.read()
    (web_config, message), others = BAD_WEB_CONFIGS[0], BAD_WEB_CONFIGS[1:]
    out = exporter.role(expect_ok=False, xdp_metrics_web_config=web_config)
    assert message in only(failure_messages(out)), (message, failure_messages(out))
    with open(exporter.config_file, encoding="utf-8") as src:
        assert src.read() == config
    assert not os.path.exists(os.path.join(exporter.base, "etc", exporter.name + ".web.yml"))
    assert exporter.pid() == pid and "ebpf_xdp_exporter_info" in exporter.scrape()
    # As the role asks: the configuration with a web configuration file, whose content is given.
    with_web = dict(json.loads(config), web_config_file=os.path.join(exporter.base, "etc", exporter.name + ".web.yml"))
    for web_config, message in others:
        proc = subprocess.run(exporter.command() + [
            "--config", exporter.config_file, "--check", "--config-json", json.dumps(with_web),
            "--web-config-json", json.dumps(web_config)], capture_output=True, text=True, check=False)
        assert proc.returncode == 2 and message in proc.stderr, (message, proc.stdout, proc.stderr)
    assert exporter.pid() == pid


# ---------------------------------------------------------------- the dashboard's queries


def test_dashboard_queries_are_valid_promql(workdir):
    with open(DASHBOARD, encoding="utf-8") as src:
        dashboard = json.load(src)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    values = {"$__rate_interval": "1m", "$netns": ".*", "$interface": ".*", "$drop_programs": "xdp_drop_count",
              "$user_map": ".*", "$user_field": ".*"}
    rules = []
    for i, expr in enumerate(exprs):
        for var, text in values.items():
            expr = expr.replace(var, text)
        assert "$" not in expr, expr
        rules.append({"record": "dashboard:expr_%d" % i, "expr": expr})
    path = os.path.join(workdir, "rules.yml")
    with open(path, "w", encoding="utf-8") as out:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, out)
    proc = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "SUCCESS: %d rules found" % len(rules) in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------- the systemd unit


UNIT_TEMPLATE = os.path.join(ROOT, "roles", "xdp_metrics", "templates", "ebpf-xdp-metrics.service.j2")
MAX_EXPOSURE = 4.5


def render_unit(workdir, **role_vars):
    """The role's systemd unit for role_vars (over its defaults), rendered by Ansible's template module: its
    path. systemd is not PID 1 here, so the unit is judged offline and its limits are applied by hand."""
    role = os.path.join(ROOT, "roles", "xdp_metrics")
    unit = os.path.join(workdir, "%s.service" % role_vars.get("xdp_metrics_service_name", "ebpf-xdp-metrics"))
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars_files": [os.path.join(role, "defaults", "main.yml"), os.path.join(role, "vars", "main.yml")],
             "vars": {"role_path": role},
             "tasks": [{"name": "Render the unit", "ansible.builtin.template": {"src": UNIT_TEMPLATE, "dest": unit}}]}]
    playbook = os.path.join(workdir, "unit.yml")
    with open(playbook, "w", encoding="utf-8") as out:
        yaml.safe_dump(play, out)
    # Extra vars: above vars_files, as inventory values are above a role's defaults.
    ansible_playbook("-i", "localhost,", "-c", "local", playbook,
                     extra_vars=[dict(role_vars, ansible_python_interpreter=SYSTEM_PYTHON)])
    return unit


def unit_directives(path):
    """{directive: [values]} of a unit's [Service] section."""
    found, section = {}, None
    with open(path, encoding="utf-8") as src:
        for line in src:
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[Service]" and "=" in line and not line.startswith("#"):
                key, _sep, val = line.partition("=")
                found.setdefault(key, []).append(val)
    return found


def exposure(unit):
    """systemd-analyze's overall exposure of the unit (0 safe .. 10 unsafe), judged offline."""
    proc = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", unit], capture_output=True,
                          text=True, check=False)
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    return float(match.group(1))


def test_systemd_unit_is_hardened(workdir):
    unit = render_unit(workdir)
    directives = unit_directives(unit)
    for key, val in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("ProtectHome", "yes"),
                     ("PrivateTmp", "yes"), ("ProtectKernelModules", "yes"), ("ProtectKernelTunables", "yes"),
                     ("ProtectControlGroups", "yes"), ("SystemCallArchitectures", "native"),
                     ("RestrictNamespaces", "net"), ("CapabilityBoundingSet", "CAP_SYS_ADMIN CAP_NET_ADMIN"),
                     ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6 AF_NETLINK"),
                     ("RuntimeDirectory", "ebpf_xdp"), ("RuntimeDirectoryPreserve", "yes")):
        assert directives.get(key) == [val], (key, directives.get(key))
    assert "ReadWritePaths" not in directives  # http mode writes nothing but its pid file
    score = exposure(unit)
    print("systemd-analyze security exposure of the http unit: %.1f" % score)
    assert score <= MAX_EXPOSURE, score

    # textfile mode may write its directory, and a pid directory outside /run is named as such.
    textdir = os.path.join(workdir, "textfile")
    unit = render_unit(workdir, xdp_metrics_mode="textfile", xdp_metrics_textfile_dir=textdir,
                       xdp_metrics_run_dir="/var/run-elsewhere/ebpf", xdp_metrics_service_name="textfile")
    directives = unit_directives(unit)
    assert directives["ReadWritePaths"] == ["/var/run-elsewhere/ebpf", textdir], directives
    assert "RuntimeDirectory" not in directives
    score = exposure(unit)
    print("systemd-analyze security exposure of the textfile unit: %.1f" % score)
    assert score <= MAX_EXPOSURE, score


# What MemoryDenyWriteExecute= asks of the kernel, as systemd does it: prctl PR_SET_MDWE where the kernel has it
# (Linux 6.3), else a seccomp filter refusing memory both writable and executable (mmap with PROT_WRITE and
# PROT_EXEC, mprotect and pkey_mprotect adding PROT_EXEC) with EPERM; then proved by such an mmap failing.
# x86-64 only (the machines and the VM): seccomp_data's arch at 4, nr at 0, the low half of args[2] at 32.
DENY_WRITE_EXECUTE = """
import ctypes, errno, mmap
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:
    assert ctypes.get_errno() == errno.EINVAL, 'PR_SET_MDWE: %s' % errno.errorcode[ctypes.get_errno()]
    class Insn(ctypes.Structure):
        _fields_ = [('code', ctypes.c_uint16), ('jt', ctypes.c_uint8), ('jf', ctypes.c_uint8), ('k', ctypes.c_uint32)]
    class Prog(ctypes.Structure):
        _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.POINTER(Insn))]
    LD, JEQ, AND, RET, ALLOW, EPERM = 0x20, 0x15, 0x54, 0x06, 0x7fff0000, 0x50000 | errno.EPERM
    insns = [(LD, 0, 0, 4), (JEQ, 0, 10, 0xC000003E), (LD, 0, 0, 0),
             (JEQ, 2, 0, 9), (JEQ, 4, 0, 10), (JEQ, 3, 6, 329),
             (LD, 0, 0, 32), (AND, 0, 0, 6), (JEQ, 4, 3, 6),
             (LD, 0, 0, 32), (AND, 0, 0, 4), (JEQ, 1, 0, 4),
             (RET, 0, 0, ALLOW), (RET, 0, 0, EPERM)]
    table = (Insn * len(insns))(*[Insn(*insn) for insn in insns])
    assert libc.prctl(22, 2, ctypes.byref(Prog(len(insns), table)), 0, 0) == 0, 'seccomp: %d' % ctypes.get_errno()
try:
    mmap.mmap(-1, 4096, prot=mmap.PROT_WRITE | mmap.PROT_EXEC)
    raise AssertionError('memory both writable and executable was given')
except PermissionError:
    pass
"""


def bounded_once(pin_root, caps, read_only_bpffs=True):
    """One --once exposition of the checkout's exporter run as the unit runs it: root with only `caps` (its
    CapabilityBoundingSet, as systemd bounds it), no new privileges, writable+executable memory denied
    (DENY_WRITE_EXECUTE, MemoryDenyWriteExecute=), and bpffs mounted read-only (ProtectSystem=strict):
    (exit code, stdout, stderr)."""
    config = {"service": "bounded", "pin_root": pin_root, "port": 9, "pid_file": "/dev/null"}
    exporter = os.path.join(ROOT, "roles", "xdp_metrics", "files", "ebpf_xdp_exporter.py")
    inner = DENY_WRITE_EXECUTE + (
        "import os, sys\n"
        "os.execv(sys.executable, [sys.executable, '-s', %r, '--config', '/dev/null', '--config-json', %r, "
        "'--once'])\n" % (exporter, json.dumps(config)))
    bounded = ["setpriv", "--no-new-privs", "--inh-caps=-all",
               "--bounding-set", ",".join(["-all"] + ["+" + cap.lower()[len("cap_"):] for cap in caps]),
               SYSTEM_PYTHON, "-c", inner]
    script = "mount --make-rprivate / && %s exec \"$@\"" % (
        "mount -o remount,bind,ro /sys/fs/bpf &&" if read_only_bpffs else "")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh"] + bounded, capture_output=True, text=True,
                          check=False, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".build", "collections")))
    return proc.returncode, proc.stdout, proc.stderr


def test_the_units_capabilities_read_every_namespace_and_none_is_not_enough(pair, run, drop_obj, workdir, pin_root):
    caps = unit_directives(render_unit(workdir))["CapabilityBoundingSet"][0].split()
    assert sorted(caps) == ["CAP_NET_ADMIN", "CAP_SYS_ADMIN"], caps
    attach(run, pair, drop_obj)
    sent = pair.burst(run, count=100, protocols=("udp",))["sent"]["udp"]
    code, page, err = bounded_once(pin_root, caps)
    assert code == 0, err
    assert value(page, "ebpf_xdp_netns_up", netns=pair.rx) == 1, err
    assert value(page, "ebpf_xdp_packets_total", netns=pair.rx, proto="udp") == sent
    # The initial namespace is still called host although /proc/1/ns/net cannot be read without CAP_SYS_PTRACE.
    assert value(page, "ebpf_xdp_netns_up", netns="host") == 1
    # CAP_SYS_ADMIN alone: enough from Linux 6.9, whose BPF_PROG_QUERY takes it; before, the tcx hook's query
    # is refused and the namespace is down, said why (what the unit's CAP_NET_ADMIN is for).
    code, page, err = bounded_once(pin_root, ["CAP_SYS_ADMIN"])
    if kernel_version() >= (6, 9):
        assert code == 0 and value(page, "ebpf_xdp_netns_up", netns=pair.rx) == 1, err
    else:
        assert code == 0 and value(page, "ebpf_xdp_netns_up", netns=pair.rx) == 0, page
        assert "query tcx_ingress hook of ifindex 1: Operation not permitted" in err, err
    # Without CAP_SYS_ADMIN the namespace cannot be entered: down, and said why.
    code, page, err = bounded_once(pin_root, [])
    assert code == 0 and value(page, "ebpf_xdp_netns_up", netns=pair.rx) == 0, page
    assert "setns /run/netns/%s: Operation not permitted" % pair.rx in err, err


# ---------------------------------------------------------------- root never writes through a link


def test_textfile_and_pid_file_are_never_written_through_a_link(pair, run, drop_obj, workdir, pin_root):
    textdir = os.path.join(workdir, "textfile")
    rundir = os.path.join(workdir, "run")
    os.makedirs(textdir)
    os.makedirs(rundir)
    victim = os.path.join(workdir, "victim")
    with open(victim, "w", encoding="ascii") as out:
        out.write("precious\n")
    os.chmod(victim, 0o600)

    def untouched():
        with open(victim, encoding="ascii") as src:
            assert src.read() == "precious\n"
        assert os.stat(victim).st_mode & 0o777 == 0o600

    exp = Exporter(workdir, pin_root, xdp_metrics_mode="textfile", xdp_metrics_textfile_dir=textdir,
                   xdp_metrics_textfile_interval=0.3)
    path = os.path.join(textdir, exp.name + ".prom")
    # The names the writers used to open with open(): the pid file's <pid_file>.tmp, planted before the start.
    os.symlink(victim, exp.pid_file + ".tmp")
    try:
        attach(run, pair, drop_obj)
        exp.role()
        pid = exp.pid()
        assert pid, exp.log()
        untouched()
        # The metrics file's old temporary name, <path>.<pid>.tmp, planted once the pid is known, and the
        # target itself replaced by a link: the link is refused (said in the log), never written through.
        os.symlink(victim, "%s.%s.tmp" % (path, pid))
        time.sleep(1)
        # In one step (a link renamed over the file): the exporter writes every 0.3 s, and could put a file
        # back between an unlink and a symlink (ci53, under load).
        os.symlink(victim, path + ".link")
        os.replace(path + ".link", path)
        time.sleep(1.5)
        untouched()
        assert os.path.islink(path)
        assert "refusing to write %s: it is a symbolic link" % path in exp.log()
        # Put right, the file is written again by the same exporter.
        os.unlink(path)
        deadline = time.monotonic() + 10
        while not os.path.isfile(path) and time.monotonic() < deadline:
            time.sleep(0.2)
        with open(path, encoding="utf-8") as src:
            assert "ebpf_xdp_exporter_info" in src.read()
        assert exp.pid() == pid and not os.path.islink(path) and os.stat(path).st_mode & 0o777 == 0o644

        # A pid file that is a link: the start is refused with the reason, nothing written through it.
        exp.role(xdp_metrics_state="absent")
        os.symlink(victim, exp.pid_file)
        out = exp.role(expect_ok=False)
        assert "refusing to write %s: it is a symbolic link" % exp.pid_file in only(failure_messages(out))
        untouched()
    finally:
        exp.stop()


def test_a_textfile_directory_others_can_write_is_refused_and_changes_nothing(workdir, pin_root):
    textdir = os.path.join(workdir, "shared")
    os.makedirs(textdir)
    os.chmod(textdir, 0o777)
    exp = Exporter(workdir, pin_root, xdp_metrics_mode="textfile", xdp_metrics_textfile_dir=textdir)
    try:
        out = exp.role(expect_ok=False)
        message = only(failure_messages(out))
        assert "textfile directory %s: refusing to write in %s: %s is writable by its group or by others (mode 0777)" % (
            textdir, textdir, textdir) in message, message
        assert not os.path.exists(exp.config_file) and not exp.pid() and os.listdir(textdir) == []
    finally:
        exp.stop()
