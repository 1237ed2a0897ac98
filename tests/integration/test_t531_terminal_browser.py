"""t531: the terminal in the console, in Debian's chromium
(tests/browser/t531_terminal.mjs) against the real suanlid (serving the
console built into SUANLI_BUILD/console) and the shared cluster's real agent:
the instance page's Terminal button, `hostname` typed into xterm.js shows
the instance id, and a closed and reopened terminal shows the same tmux
screen. Fails on any console error, any request leaving the origin but the
instance's terminal host, any axe-core violation of impact serious or
critical. Screenshots land in SUANLI_BUILD/artifacts/t531-terminal/."""
import json
import os
import subprocess

import pytest

from conftest import chrooted, BUILD, PASSWORD, ROOT, undocumented_calls

# The agent refuses terminals in a chroot (node/agent.c, setup_terminal):
# the runtime's exec lands on the mount namespace's root, which there is the
# host's, not the instance's. fresh-machine runs the suite in a chroot; a
# real host is never one.
pytestmark = pytest.mark.skipif(chrooted() is not None,
                                reason="terminals are off when the agent runs in a chroot")

SCRIPT = os.path.join(ROOT, "tests", "browser", "t531_terminal.mjs")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def test_terminal_in_the_console(cluster):
    for need, what in ((os.path.join(BUILD, "console", "index.html"),
                        f"run make BUILD={BUILD} console"),
                       (os.path.join(ROOT, "console", "node_modules", "puppeteer-core"),
                        "run make console (npm ci)"),
                       (CHROMIUM, "run scripts/deps.sh test (installs chromium)")):
        if not os.path.exists(need):
            pytest.fail(f"{need} is missing: {what}")
    user = cluster.renter()
    inst = cluster.create(user)
    try:
        env = dict(os.environ, SUANLI_BUILD=BUILD, CHROMIUM=CHROMIUM,
                   SUANLI_URL=cluster.server.url, SUANLI_EMAIL=user["email"],
                   SUANLI_PASSWORD=PASSWORD, SUANLI_INSTANCE=inst["id"])
        p = subprocess.run(["node", SCRIPT], capture_output=True, text=True, env=env,
                           timeout=300)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        assert lines, f"no result ({p.returncode}):\n{p.stdout}\n{p.stderr}"
        out = json.loads(lines[-1])
        if not out["ok"]:
            # what tmux holds, and what the agent did, for the message
            tmux = cluster.ssh(user, inst, "tmux ls 2>&1; tmux capture-pane -p -S -60 -t console",
                               check=False).stdout
            log = "\n".join(ln for ln in cluster.node.log_text().splitlines()
                            if "terminal" in ln)[-3000:]
        assert out["ok"], "\n".join(out["failures"]) + "\n" + p.stderr[-3000:] + \
            "\n" + tmux + "\n" + log
        assert out["results"]["hostname"] and out["results"]["reattached"]
        calls = out["results"].get("api_calls", [])
        assert calls and not undocumented_calls(calls), undocumented_calls(calls)
        assert out["results"]["terminal_host"] == \
            f"{inst['id']}-terminal.localhost:{cluster.node.proxy_port}"
    finally:
        cluster.verb(user, inst["id"], "release")
