"""Health, Prometheus metrics, the request log, and configuration errors."""
import os
import re
import subprocess

from conftest import SUANLID, Server, unique_email


def metric(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pat = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)"
    m = re.search(r"^" + pat + r"$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_healthz_reports_store_and_schema(server):
    r = server.request("GET", "/healthz")
    assert r.status == 200
    assert r.json["status"] == "ok"
    assert r.json["store"] == "sqlite"
    assert r.json["schema_version"] >= 1


def test_metrics_count_requests_by_route_and_class(server):
    before = server.request("GET", "/metrics")
    assert before.status == 200
    assert before.headers["Content-Type"].startswith("text/plain")
    b = metric(before.body, "suanli_http_requests_total", method="GET", route="/v1/me", code="4xx")
    for _ in range(3):
        assert server.request("GET", "/v1/me").status == 401
    after = server.request("GET", "/metrics").body
    assert metric(after, "suanli_http_requests_total", method="GET", route="/v1/me",
                  code="4xx") == b + 3
    # a histogram with cumulative buckets ending in +Inf == count
    inf = metric(after, "suanli_http_request_duration_seconds_bucket", le="+Inf")
    assert inf == metric(after, "suanli_http_request_duration_seconds_count") > 0
    assert "# TYPE suanli_http_request_duration_seconds histogram" in after
    users_before = metric(after, "suanli_users")
    server.register()
    assert metric(server.request("GET", "/metrics").body, "suanli_users") == users_before + 1


def test_one_log_line_per_request(server):
    user = server.register()
    marker = "/v1/no-such-route-" + unique_email("log").split("@")[0]
    server.request("GET", marker)
    server.request("GET", "/v1/me", token=user["token"])
    with open(server.log_path, errors="replace") as f:
        log = f.read()
    assert re.search(r"http GET " + re.escape(marker) + r" 404 [\d.]+ms ip=127\.0\.0\.1 user=-",
                     log), log[-2000:]
    assert re.search(r"http GET /v1/me 200 [\d.]+ms ip=127\.0\.0\.1 user=" + user["id"], log)


def test_bad_config_line_stops_startup_naming_file_line_option(tmp_path):
    conf = tmp_path / "suanlid.conf"
    conf.write_text("# comment\nlisten = 127.0.0.1:0\n[auth]\nlogin_max_failures = many\n")
    p = subprocess.run([SUANLID, "--config", str(conf), "--data-dir", str(tmp_path / "d")],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 1
    assert f"{conf}:4:" in p.stderr
    assert "auth.login_max_failures" in p.stderr
    assert not (tmp_path / "d").exists(), "nothing is created before the config is valid"

    conf.write_text("no_such_option = 1\n")
    p = subprocess.run([SUANLID, "--config", str(conf)], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 1 and f"{conf}:1:" in p.stderr and "no_such_option" in p.stderr


def test_help_config_lists_every_option_with_default():
    out = subprocess.run([SUANLID, "--help-config"], capture_output=True, text=True,
                         timeout=10).stdout
    for name in ("listen", "auth.session_ttl", "auth.require_verification",
                 "payments.webhook_secret", "http.max_body_bytes"):
        assert re.search(r"^\s+" + re.escape(name) + r"\s", out, re.M), name


def test_config_file_values_apply(tmp_path):
    conf = tmp_path / "suanlid.conf"
    conf.write_text("# from a file\n[auth]\nrequire_verification = false\n")
    s = Server(str(tmp_path / "data"), extra_args=["--config", str(conf)])
    os.makedirs(s.data_dir)
    s.start()
    try:
        user = s.register()
        me = s.request("GET", "/v1/me", token=user["token"]).json
        assert me["verification"] == "none" and me["can_start_instances"] is True
    finally:
        s.stop()
    assert os.stat(os.path.join(s.data_dir, "admin-password")).st_mode & 0o777 == 0o600
