# -*- coding: utf-8 -*-
"""Scrape an exporter COUNT times, one after the other, as a Prometheus server would.

    scrape_times.py URL COUNT PID_FILE

Prints JSON: each scrape's seconds as the client sees them, the exporter's
own collect time per scrape (ebpf_xdp_collect_duration_seconds), the programs
each page shows and the namespaces it could not read (ebpf_xdp_netns_up 0),
of the last page its samples and bytes; then the exporter's resident memory
(VmRSS) and its peak (VmHWM) in MiB. Standard library only:
it runs on the host, next to the exporter.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request


def main():
    url, count, pid_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    seconds, collect, programs, down, text = [], [], [], [], ""
    for _attempt in range(count):
        start = time.monotonic()
        with opener.open(url, timeout=60) as resp:
            text = resp.read().decode()
        seconds.append(time.monotonic() - start)
        found = re.search(r"^ebpf_xdp_collect_duration_seconds (\S+)$", text, re.M)
        collect.append(float(found.group(1)) if found else None)
        programs.append(len(re.findall(r"^ebpf_xdp_program_info\{", text, re.M)))
        down.append(re.findall(r'^ebpf_xdp_netns_up\{netns="([^"]*)"\} 0', text, re.M))
    with open(pid_file, encoding="ascii") as src:
        pid = int(src.readline())  # the next line names the configuration it serves
    with open("/proc/%d/status" % pid, encoding="ascii") as src:
        status = dict(line.split(":", 1) for line in src.read().splitlines() if ":" in line)
    json.dump({"seconds": seconds, "collect_seconds": collect, "programs": programs, "netns_down": down,
               "samples": sum(1 for line in text.splitlines() if line and not line.startswith("#")),
               "page_bytes": len(text),
               "rss_mib": int(status["VmRSS"].split()[0]) / 1024, "hwm_mib": int(status["VmHWM"].split()[0]) / 1024},
              sys.stdout)


if __name__ == "__main__":
    main()
