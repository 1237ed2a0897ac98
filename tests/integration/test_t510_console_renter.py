"""t510: a renter's whole day in the web console (issue 13, items 1, 2 and 5),
in Debian's chromium driven by tests/browser/t510_renter.mjs against the real
suanlid (serving the console built into SUANLI_BUILD/console) and the shared
cluster's real agent.

register (the console's form) -> real-name verification submitted in the
console, approved by the operator through the API -> credit (the header's
balance changes through the event stream, no reload) -> market -> create from
a host's offer (the price per hour and how long the balance lasts shown
first) -> running (through the stream) -> copy the SSH command and the
password and log in with exactly those (ssh asks SSH_ASKPASS for the copied
password) -> TensorBoard's link (6006) opens a page served from inside ->
terminal button -> stop -> start without GPUs -> the list (copy from a row,
phone width) -> billing: today's bar in the chart, the CSV -> events, the
Chinese locale -> release with the typed name -> log out.

The script fails on any console error, any request leaving the origin
(but for the instance's own service host it opens), any axe-core violation
of impact serious or critical on each page and dialog. Screenshots land in
SUANLI_BUILD/artifacts/t510-renter/."""
import json
import os
import subprocess

import pytest

from conftest import BUILD, PASSWORD, ROOT, host_leftovers, random_id_number, \
    chrooted, undocumented_calls, unique_email, wait_for

SCRIPT = os.path.join(ROOT, "tests", "browser", "t510_renter.mjs")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CREDIT = 50_000_000  # 50.00


def browse(script, env, timeout=900):
    """Runs a tests/browser script; returns its JSON, asserting it passed."""
    for need, what in ((os.path.join(BUILD, "console", "index.html"),
                        f"run make BUILD={BUILD} console"),
                       (os.path.join(ROOT, "console", "node_modules", "puppeteer-core"),
                        "run make console (npm ci)"),
                       (CHROMIUM, "run scripts/deps.sh test (installs chromium)")):
        if not os.path.exists(need):
            pytest.fail(f"{need} is missing: {what}")
    e = dict(os.environ)
    e.update({"SUANLI_BUILD": BUILD, "CHROMIUM": CHROMIUM})
    e.update({k: str(v) for k, v in env.items()})
    p = subprocess.run(["node", script], capture_output=True, text=True, env=e, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"{script} printed no result ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    out = json.loads(lines[-1])
    assert out["ok"], f"{os.path.basename(script)}:\n" + "\n".join(out["failures"]) + \
        "\n" + p.stderr[-3000:]
    # the API stays the one source of truth: only documented routes
    calls = out["results"].get("api_calls", [])
    assert calls and not undocumented_calls(calls), undocumented_calls(calls)
    return out


def test_renter_day_in_the_console(cluster):
    s = cluster.server
    email = unique_email("web")
    out = browse(SCRIPT, {"SUANLI_URL": s.url, "SUANLI_EMAIL": email, "SUANLI_PASSWORD": PASSWORD,
                          "SUANLI_ID_NUMBER": random_id_number(),
                          "SUANLI_ADMIN_TOKEN": s.admin_token, "SUANLI_CREDIT_MICROS": CREDIT})
    r = out["results"]
    iid = r["instance_id"]
    print(json.dumps({k: v for k, v in r.items() if k not in ("axe", "bill_csv")}, indent=1))
    if r.get("start_retries"):
        print("starts tried again after an iptables race on this machine:", r["start_retries"])

    # the forms a password manager fills
    assert "email:email:email" in r["register_form"]
    assert "password:password:new-password" in r["register_form"]
    # verification: submitted in the console, approved by the operator
    assert r["verification_after_submit"] == "pending"
    assert r["verification_badge"] == "approved"
    # the credit reached the header through the event stream
    assert r["balance_before"] != r["balance_after"] and "50.00" in r["balance_after"]
    # the market lists the cluster's host; the dialog priced it before creating
    assert sum(r["market_hosts"]) >= 1
    assert r["create_host_preset"] == cluster.node.node_id
    assert "1.98" in r["create_price"] and "/ hour" in r["create_price"], r["create_price"]
    assert "covers about" in r["create_price"], r["create_price"]

    # the instance the console made, as the API sees it
    inst = s.request("GET", f"/v1/instances/{iid}", token=s.login(email)).json
    assert inst["name"] == r["instance_name"]
    assert inst["node_id"] == cluster.node.node_id
    # the copied command is the API's, and it (with the copied password) got in
    assert r["copied_command"] == r["shown_command"] == inst["ssh"]["command"]
    assert r["password_copied"] and r["password_hidden"] == "••••••••"
    assert r["ssh_hostname"] == iid
    # TensorBoard's link opened the page served inside the instance
    assert r["tensorboard_link"].startswith(f"http://{iid}-6006.")
    assert r["tensorboard_page"] == f"hello-from-{iid}"
    # an agent in a chroot serves no terminals: no button, a note about SSH
    assert r["terminal"] == ("not_served" if chrooted() else "loaded"), r["terminal"]
    # stop, then start without GPUs
    assert r["after_stop"] == "stopped"
    assert r["mode_after_start"] == "no GPU"
    assert "no GPU" in r["list_row"] and "running" in r["list_row"]
    assert r["list_copied"] == inst["ssh"]["command"]
    assert r["narrow_overflow"] <= 0, r["narrow_overflow"]
    assert r["keyboard_unreached"] == [], r["keyboard_unreached"]
    # the bill: today's charge in the chart and in the CSV
    assert r["bill_today_micros"] > 0
    csv = r["bill_csv"].splitlines()
    assert csv[0] == ("day,gpu,nogpu,data_disk,file_storage,image_storage,plan,plan_refund,"
                      "amount,charges,seconds")
    assert csv[-1].startswith("total,")
    bill = s.request("GET", "/v1/bills?by=day", token=s.login(email)).json
    # (the instance ran on until its release: today's row may have grown since)
    today = [row for row in bill["rows"] if row["day"] == r["bill_day"]]
    assert today and today[0]["amount_micros"] >= r["bill_today_micros"], (today, r)
    assert {"create", "stop", "start"} <= set(r["event_kinds"])
    assert r["stream_badge"] == "Live"
    assert "容器实例" in r["zh_nav"]
    # release asked for the typed name first
    assert r["release_disabled_before_typing"] is True
    assert r["after_release"] == "released"
    wait_for(lambda: not host_leftovers(cluster.node.data_dir, iid, inst["ssh"]["port"]),
             timeout=30, what="the released instance gone from the host")
    assert r["me_after_logout"] == 401
