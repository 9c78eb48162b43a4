"""The docs site, built by `make docs` (scripts/docs.sh: antsibull-docs and Sphinx), opened in a real browser.

Headless Chromium (Debian's chromium, scripts/setup.sh) renders the datapath module's page: its options table
must hold the module's options and its examples their text. The rendered page is also saved as a screenshot,
.build/docs-datapath.png, for a person to look at.
"""

import html.parser
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import ROOT

SITE = os.path.join(ROOT, ".build", "docs", "build", "html")
PAGE = os.path.join(SITE, "collections", "ebpf", "xdp", "datapath_module.html")
SCREENSHOT = os.path.join(ROOT, ".build", "docs-datapath.png")
CHROMIUM = shutil.which("chromium")
# As root, without a display, and nothing fetched from the network (no updates, no sync, no QUIC probes).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")


class Page(html.parser.HTMLParser):
    """The rendered DOM's parameter anchors (id parameter-NAME, one per option row of the options table)
    and the text of its highlighted code blocks (the examples)."""

    def __init__(self):
        super().__init__()
        self.parameters, self.code, self._depth = [], [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if (attrs.get("id") or "").startswith("parameter-"):
            self.parameters.append(attrs["id"][len("parameter-"):])
        if tag == "div" and "highlight" in (attrs.get("class") or "").split():
            self._depth = 1
            self.code.append("")
        elif self._depth and tag == "div":
            self._depth += 1

    def handle_endtag(self, tag):
        if self._depth and tag == "div":
            self._depth -= 1

    def handle_data(self, data):
        if self._depth:
            self.code[-1] += data


def chromium(*args):
    profile = tempfile.mkdtemp(prefix="ebpf_xdp_chromium.")
    # Besides its profile, Chromium writes its crash reports and dconf's cache under the XDG directories, the
    # user's home by default: make test leaves nothing there.
    env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(profile, "config"), XDG_CACHE_HOME=os.path.join(profile, "cache"))
    try:
        proc = subprocess.run([CHROMIUM, *FLAGS, "--user-data-dir=" + profile, *args], capture_output=True,
                              text=True, timeout=120, check=False, env=env)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def site():
    assert CHROMIUM, "chromium is not installed (scripts/setup.sh installs it)"
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "docs.sh")], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert os.path.exists(PAGE), PAGE
    return "file://" + PAGE


def test_the_datapath_page_renders_its_options_and_examples_in_chromium(site):
    page = Page()
    page.feed(chromium("--dump-dom", site))
    # Top-level options and suboptions (config/xdp, ...) each have a row.
    for option in ("config", "state", "namespaces", "pin_root", "sources"):
        assert option in page.parameters, page.parameters
    assert "config/xdp" in page.parameters, page.parameters
    examples = "\n".join(page.code)
    assert "Converge the receiver's data path, and remove what it no longer declares" in examples, examples[:2000]
    assert "ebpf.xdp.datapath:" in examples and "state: overridden" in examples, examples[:2000]


def test_a_screenshot_of_the_datapath_page(site):
    if os.path.exists(SCREENSHOT):
        os.unlink(SCREENSHOT)
    chromium("--screenshot=" + SCREENSHOT, "--window-size=1280,1600", site)
    with open(SCREENSHOT, "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(SCREENSHOT) > 20000  # a rendered page, not a blank one
