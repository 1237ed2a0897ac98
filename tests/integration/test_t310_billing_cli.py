"""t310: the suanli CLI's billing commands (bill, bill --chart, bill charges,
events, plan, balance, the plan and auto-release columns of ls and show,
admin billing) against the real suanlid and the real suanli-node agent of the
session's cluster: what the CLI prints adds up to the charges and to the
ledger."""
import csv
import io
import json
import re
import time
from decimal import Decimal

import pytest

from conftest import Cli

MODEL = "RTX 4090"


def _with_token(run, token):
    def wrapped(*args, env=None, **kw):
        return run(*args, env={"SUANLI_TOKEN": token, **(env or {})}, **kw)
    return wrapped


def cli_for(cluster, home, token):
    c = Cli(cluster.server, home)
    c.run = _with_token(c.run, token)
    return c


@pytest.fixture(scope="module")
def billed(cluster, tmp_path_factory):
    """A renter with one instance that ran a few seconds and was stopped,
    and a billing pass after it: charges for the GPU and the data disk."""
    s = cluster.server
    user = cluster.renter(credit_micros=100_000_000)
    r = cli_for(cluster, str(tmp_path_factory.mktemp("renter")), user["token"])
    admin = cli_for(cluster, str(tmp_path_factory.mktemp("admin")), s.admin_token)
    months = {time.strftime("%Y-%m", time.gmtime())}
    p = r.run("-o", "json", "create", "--gpu-model", MODEL, "--data-disk", "60", "--name",
              "billme")
    assert p.returncode == 0, p
    iid = json.loads(p.stdout)["id"]
    made = [iid]
    try:
        running = r.run("balance", check=True).stdout
        balance_json = json.loads(r.run("-o", "json", "balance", check=True).stdout)
        time.sleep(2)  # a few seconds of GPU time to bill
        p = r.run("stop", iid)
        assert p.returncode == 0 and "stopped" in p.stdout, p
        p = admin.run("admin", "billing", "run")
        assert p.returncode == 0 and p.stdout.startswith("billing pass:"), p
        months.add(time.strftime("%Y-%m", time.gmtime()))
        yield {"r": r, "admin": admin, "user": user, "iid": iid, "made": made,
               "months": sorted(months), "running_balance": running,
               "running_balance_json": balance_json, "cluster": cluster}
    finally:
        for i in made:
            r.run("release", "--yes", i)


def micros(text):
    return int(Decimal(text) * 1_000_000)


def read_csv(text):
    rows = list(csv.reader(io.StringIO(text)))
    assert rows, text
    return rows[0], rows[1:]


def all_charges(r, months, *extra):
    items = []
    for m in months:
        p = r.run("-o", "json", "bill", "charges", "--month", m, *extra)
        assert p.returncode == 0, p
        page = json.loads(p.stdout)
        assert page["next_cursor"] is None
        items += page["items"]
    return items


def stable(fn, tries=5):
    """fn() twice in a row with the same answer: the stopped instance's data
    disk is still billed, and a settlement may land between two reads."""
    last = fn()
    for _ in range(tries):
        again = fn()
        if again == last:
            return again
        last = again
    raise AssertionError(f"no stable answer: {last!r}")


def snapshot(r, months):
    """The charges, the bill of each month as CSV and the ledger, read
    between two equal reads of the charges."""
    charges = all_charges(r, months)
    for _ in range(5):
        bills = {m: r.run("bill", "--month", m, "-o", "csv", check=True).stdout for m in months}
        ledger = json.loads(r.run("-o", "json", "ledger", "--all", check=True).stdout)["items"]
        again = all_charges(r, months)
        if again == charges:
            return charges, bills, ledger
        charges = again
    raise AssertionError("the charges kept changing")


def test_bill_csv_adds_up_to_the_charges_and_the_ledger(billed):
    r, iid, months = billed["r"], billed["iid"], billed["months"]
    charges, bills, ledger = snapshot(r, months)
    assert charges, "no charges after a run, a stop and a billing pass"
    kinds = {c["kind"] for c in charges}
    assert {"gpu", "data_disk"} <= kinds, kinds
    assert all(c["instance_id"] == iid for c in charges)

    total = 0
    for m in months:
        header, rows = read_csv(bills[m])
        assert header[:1] == ["day"] and header[-3:] == ["amount", "charges", "seconds"], header
        assert {"gpu", "nogpu", "data_disk", "plan", "plan_refund"} <= set(header)
        body, last = rows[:-1], rows[-1]
        assert last[0] == "total", rows
        amount = header.index("amount")
        assert sum(micros(row[amount]) for row in body) == micros(last[amount])
        month_charges = [c for c in charges if c["period_from"].startswith(m)]
        assert micros(last[amount]) == sum(c["amount_micros"] for c in month_charges)
        assert int(last[header.index("charges")]) == len(month_charges)
        for k in ("gpu", "data_disk"):
            col = header.index(k)
            assert micros(last[col]) == sum(c["amount_micros"] for c in month_charges
                                            if c["kind"] == k)
        total += micros(last[amount])

    # a plan or a refund moves exactly the charges under it; the usage
    # transactions the meters' days (txn_id "") and open pieces
    by_txn = {e["txn_id"]: e for e in ledger}
    under = {}
    for c in charges:
        if c["meter_seq"] is None:
            assert c["txn_id"] in by_txn, c
            under[c["txn_id"]] = under.get(c["txn_id"], 0) + c["amount_micros"]
        else:
            assert c["txn_id"] == "" and (c["seq"] is None) == c["open"], c
    for txn, amount in under.items():
        assert by_txn[txn]["amount_micros"] == -amount, (txn, amount)
    usage = -sum(e["amount_micros"] for e in ledger if e["memo"].startswith("usage:"))
    assert usage == sum(c["amount_micros"] for c in charges if c["meter_seq"] is not None)
    spent = -sum(e["amount_micros"] for e in ledger if e["kind"] != "credit")
    assert spent == total == sum(c["amount_micros"] for c in charges)

    # grouped by instance and by kind: the same total
    m = months[-1]
    header, rows = read_csv(r.run("-o", "csv", "bill", "--month", m, "--by", "instance",
                                  check=True).stdout)
    assert header[:2] == ["instance_id", "name"]
    row = [x for x in rows if x[0] == iid][0]
    assert row[1] == "billme"
    header, rows = read_csv(r.run("bill", "--by", "kind", "--month", m, "-o", "csv",
                                  check=True).stdout)
    assert header == ["kind", "amount", "charges", "seconds"]
    assert {x[0] for x in rows[:-1]} == {c["kind"] for c in charges
                                         if c["period_from"].startswith(m)}


def test_bill_table_and_charges_table(billed):
    r, iid = billed["r"], billed["iid"]
    today = time.strftime("%Y-%m-%d", time.gmtime())
    p = r.run("bill", check=True)
    assert p.stdout.startswith("bill for ") and " in CNY" in p.stdout.splitlines()[0], p.stdout
    lines = p.stdout.splitlines()
    assert lines[1].split()[:3] == ["DAY", "GPU", "DATA"], p.stdout
    assert any(line.startswith(today) for line in lines), p.stdout
    assert lines[-1].startswith("total"), p.stdout
    text, items = stable(lambda: (
        r.run("bill", "charges", "--instance", iid, check=True).stdout,
        all_charges(r, [time.strftime("%Y-%m", time.gmtime())], "--instance", iid)))
    for c in items:
        assert c["txn_id"] in text
    last = text.splitlines()[-1]
    assert re.fullmatch(r"\d+ charges?, total \d+\.\d+", last), last
    assert int(last.split()[0]) == len(items)
    gpu_only = all_charges(r, billed["months"], "--kind", "gpu")
    assert gpu_only and {c["kind"] for c in gpu_only} == {"gpu"}
    day, p = stable(lambda: (
        json.loads(r.run("-o", "json", "bill", "charges", "--day", today, check=True).stdout),
        r.run("bill", "charges", "--day", today, "-o", "csv", check=True).stdout))
    assert all(c["period_from"].startswith(today) for c in day["items"])
    header, rows = read_csv(p)
    assert header[:2] == ["seq", "txn_id"] and len(rows) == len(day["items"])


def test_chart_has_a_bar_for_today(billed):
    r = billed["r"]
    today = time.strftime("%Y-%m-%d", time.gmtime())
    chart, table = stable(lambda: (r.run("bill", "--chart", check=True).stdout,
                                   r.run("bill", "-o", "csv", check=True).stdout))
    lines = chart.splitlines()
    assert lines[0].startswith(today[:7]) and "total" in lines[0], chart
    bar = [line for line in lines if line.startswith(today)]
    assert len(bar) == 1, chart
    assert re.search(r"[█▏▎▍▌▋▊▉]", bar[0]), bar
    header, rows = read_csv(table)
    amount = [x for x in rows if x[0] == today][0][header.index("amount")]
    assert bar[0].split()[-1] == amount
    for line in lines:
        assert len(line) <= 80, line  # characters: each block is one column
    # the largest day fills the width; no day is longer
    widths = [len(re.findall(r"[█▏▎▍▌▋▊▉]", line)) for line in lines[1:]]
    assert max(widths) >= 40, chart


def test_events_show_the_lifecycle_with_reasons(billed):
    r, iid = billed["r"], billed["iid"]
    p = r.run("events", iid, check=True)
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["TIME", "INSTANCE", "KIND", "STATE", "REASON", "MESSAGE"]
    kinds = [line.split()[3] for line in lines[1:]]
    assert "create" in kinds and "stop" in kinds, p.stdout
    assert kinds.index("create") < kinds.index("stop"), "oldest first"
    stop = [line for line in lines if line.split()[3] == "stop"][0]
    assert iid in stop and " user" in stop, stop
    # all of the renter's events: the same ones, with the instance
    p = r.run("events", "-o", "csv", check=True)
    header, rows = read_csv(p.stdout)
    assert header == ["seq", "created_at", "instance_id", "kind", "state", "reason", "message"]
    mine = [x for x in rows if x[2] == iid]
    assert [x[3] for x in mine] == kinds
    seqs = [int(x[0]) for x in rows]
    assert seqs == sorted(seqs)
    only = json.loads(r.run("-o", "json", "events", "--kind", "stop", check=True).stdout)["items"]
    assert only and {e["kind"] for e in only} == {"stop"}
    only = json.loads(r.run("-o", "json", "events", iid, "--kind", "create",
                            check=True).stdout)["items"]
    assert len(only) == 1 and only[0]["kind"] == "create"


def test_ls_and_show_count_down_to_the_auto_release(billed):
    r, iid = billed["r"], billed["iid"]
    p = r.run("ls", check=True)
    header = p.stdout.splitlines()[0]
    assert "PLAN" in header and "RELEASE IN" in header, header
    row = [line for line in p.stdout.splitlines() if line.startswith(iid)][0]
    # billing.release_after is 15 days by default: 14d 23h left just after the stop
    # (15d 0h within the second it stopped)
    assert re.search(r" (14d 23h|15d 0h) ", row) and "payg" in row and "stopped" in row, row
    p = r.run("show", iid, check=True)
    inst = json.loads(r.run("-o", "json", "show", iid, check=True).stdout)
    assert inst["release_at"] and inst["stopped_at"] and inst["plan"] == "payg"
    assert re.search(r"^auto-release:\s+\d{4}-\d\d-\d\d \d\d:\d\d UTC "
                     r"\(in (14d 23h|15d 0h)\)",
                     p.stdout, re.M), p.stdout
    assert re.search(r"^plan:\s+pay-as-you-go$", p.stdout, re.M), p.stdout
    charged = re.search(r"^charged:\s+¥(\S+)$", p.stdout, re.M)
    # the data disk is still billed: a settlement may come between the two
    assert charged and 0 < micros(charged.group(1)) <= inst["charged_micros"], p.stdout
    assert inst["charged_micros"] - micros(charged.group(1)) < 10_000


def test_balance_shows_spend_and_how_long_it_lasts(billed):
    text, b = billed["running_balance"], billed["running_balance_json"]
    assert b["spend_per_hour_micros"] > 0 and b["covers_seconds"] > 0, b
    rate = re.search(r"^spending:\s+¥(\d+\.\d+)/h$", text, re.M)
    assert rate and micros(rate.group(1)) == b["spend_per_hour_micros"], text
    assert re.search(r"^lasts:\s+about \d+[dhms] \d+[dhms] at ¥\d+\.\d+/h$", text, re.M), text
    fresh = billed["cluster"].renter(credit_micros=5_000_000)
    p = Cli(billed["cluster"].server, billed["r"].home + "-fresh").run(
        "balance", env={"SUANLI_TOKEN": fresh["token"]}, check=True)
    assert re.search(r"^spending:\s+nothing", p.stdout, re.M), p.stdout
    assert "lasts" not in p.stdout


def test_plan_day_then_payg_refunds(billed):
    r, made, cluster = billed["r"], billed["made"], billed["cluster"]
    p = r.run("-o", "json", "create", "--gpu-model", MODEL, "--data-disk", "5",
              "--plan", "day")
    assert p.returncode == 0, p
    inst = json.loads(p.stdout)
    made.append(inst["id"])
    iid = inst["id"]
    assert inst["plan"] == "day" and inst["plan_expires_at"] and inst["plan_price_micros"] > 0
    assert inst["auto_renew"] is False
    price = inst["plan_price_micros"]

    p = r.run("plan", iid, "day", "--auto-renew")
    assert p.returncode == 0, p
    assert "renews automatically" in p.stdout and "paid up front" not in p.stdout, p.stdout
    assert json.loads(r.run("-o", "json", "show", iid).stdout)["auto_renew"] is True
    p = r.run("show", iid, check=True)
    assert re.search(r"^plan:\s+day until .* UTC, renews automatically$", p.stdout, re.M), p
    assert re.search(r"^plan price:\s+¥\d+\.\d+$", p.stdout, re.M), p.stdout

    p = r.run("plan", iid, "payg")
    assert p.returncode == 0, p
    m = re.fullmatch(rf"{iid}: pay-as-you-go from now; ¥(\d+\.\d+) refunded: the day plan's "
                     r"price less the time used at the pay-as-you-go rate\n", p.stdout)
    assert m, p.stdout
    refund = micros(m.group(1))
    assert 0 < refund <= price
    refunds = all_charges(r, billed["months"], "--instance", iid, "--kind", "plan_refund")
    assert refunds and refunds[-1]["amount_micros"] == -refund, refunds

    p = r.run("plan", iid, "day")
    assert p.returncode == 0, p
    assert re.fullmatch(rf"{iid}: day plan, ¥\d+\.\d+ paid up front, until \d{{4}}-\d\d-\d\d "
                        r"\d\d:\d\d UTC; then the instance stops \(--auto-renew renews it\)\n",
                        p.stdout), p.stdout
    p = r.run("plan", iid, "payg")
    assert p.returncode == 0 and "refunded: the day plan's price less" in p.stdout, p
    p = r.run("plan", iid, "payg")
    assert p.returncode == 0 and p.stdout == f"{iid}: already pay-as-you-go\n", p

    # a week costs more than is left: refused with what is missing, exit 1
    poor = cluster.renter(credit_micros=1_000_000)
    pr = cli_for(cluster, r.home + "-poor", poor["token"])
    p = pr.run("plan", iid, "week")
    assert p.returncode == 4, p  # not theirs
    left = json.loads(r.run("-o", "json", "balance", check=True).stdout)["balance_micros"]
    assert left < 100_000_000  # a month of an RTX 4090 costs more than 1000
    p = r.run("plan", iid, "month")
    assert p.returncode == 1 and "top up" in p.stderr, p
    assert json.loads(r.run("-o", "json", "show", iid).stdout)["plan"] == "payg"
    p = r.run("admin", "billing", "check")
    assert p.returncode == 4, p  # admin routes do not exist for a renter
    p = billed["admin"].run("admin", "billing", "check")
    assert p.returncode == 0 and p.stdout.startswith("billing ok:"), p
    assert json.loads(billed["admin"].run("-o", "json", "admin", "billing", "check",
                                          check=True).stdout)["ok"] is True


BAD = [
    (("bill", "--month", "2026-13"), "YYYY-MM"),
    (("bill", "--month", "november"), "YYYY-MM"),
    (("bill", "--by", "week"), "day, instance or kind"),
    (("bill", "--chart", "--by", "kind"), "--by"),
    (("bill", "--chart", "-o", "json"), "-o"),
    (("bill", "-o", "xml"), "table, json or csv"),
    (("bill", "extra"), "unexpected argument"),
    (("bill", "charges", "--day", "2026-02-30"), "YYYY-MM-DD"),
    (("bill", "charges", "--kind", "gpus"),
     "gpu, nogpu, data_disk, file_storage, image_storage, plan or plan_refund"),
    (("bill", "charges", "--month", "2026-11", "--day", "2026-10-01"), "not in --month"),
    (("events", "--kind", "no such"), "event kind"),
    (("events", "i-a", "i-b"), "unexpected argument"),
    (("ls", "-o", "csv"), "no CSV"),
    (("-o", "csv", "balance"), "no CSV"),
    (("plan",), "missing argument"),
    (("plan", "i-x", "yearly"), "day, week, month or payg"),
    (("plan", "i-x", "payg", "--auto-renew"), "does not renew"),
    (("create", "--gpu-model", MODEL, "--plan", "weekly"), "--plan"),
    (("create", "--gpu-model", MODEL, "--auto-renew"), "--auto-renew"),
]


@pytest.mark.parametrize("args,words", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_a_message(billed, args, words):
    p = billed["r"].run(*args)
    assert p.returncode == 2, p
    assert words in p.stderr, p.stderr
    assert p.stdout == "", p.stdout


def test_not_found_and_not_logged_in(billed):
    r = billed["r"]
    assert r.run("plan", "i-nope", "day").returncode == 4
    assert r.run("events", "i-nope").returncode == 4
    nobody = Cli(billed["cluster"].server, r.home + "-nobody")
    for args in (("bill",), ("bill", "charges"), ("events",), ("plan", "i-x", "day")):
        assert nobody.run(*args).returncode == 3, args
