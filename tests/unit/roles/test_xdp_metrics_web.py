"""The pure parts of the exporter's web side (roles/xdp_metrics/files/ebpf_xdp_web.py): exporter-toolkit's web
configuration checked, basic auth decided; TLS, the threads and deadlines are tested against a real server in
tests/integration/test_xdp_metrics.py."""

import base64
import importlib.util
import os
import re
import ssl

import bcrypt
import pytest

PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "xdp_metrics", "files", "ebpf_xdp_web.py")


def _load():
    spec = importlib.util.spec_from_file_location("ebpf_xdp_web", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


web = _load()
HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()


def test_relative_files_are_the_configuration_directorys_and_defaults_are_the_toolkits():
    settings = web.parse_web_config({"tls_server_config": {"cert_file": "server.pem", "key_file": "/k/server.key"}},
                                    "/etc/ebpf_xdp/metrics")
    tls = settings["tls"]
    assert (tls["cert_file"], tls["key_file"]) == ("/etc/ebpf_xdp/metrics/server.pem", "/k/server.key")
    assert tls["min_version"] == ssl.TLSVersion.TLSv1_2 and tls["max_version"] == ssl.TLSVersion.TLSv1_3
    assert tls["verify_mode"] == ssl.CERT_NONE and settings["users"] == {}


def test_an_empty_file_is_plain_http_without_authentication():
    assert web.parse_web_config(None, "/") == {"tls": None, "users": {}, "headers": []}


def test_client_certificates_are_verified_against_the_client_ca():
    tls = web.parse_web_config({"tls_server_config": {
        "cert_file": "c", "key_file": "k", "client_ca_file": "ca.pem", "client_auth_type": "RequireAndVerifyClientCert",
        "client_allowed_sans": ["prometheus"]}}, "/d")["tls"]
    assert tls["verify_mode"] == ssl.CERT_REQUIRED and tls["client_ca_file"] == "/d/ca.pem"
    assert tls["allowed_sans"] == ["prometheus"]


@pytest.mark.parametrize("raw,message", [
    ("just text", "the web configuration must be a mapping"),
    ({"basic_auth_user": {}}, "unknown setting basic_auth_user"),
    ({"rate_limit": {"burst": 1}}, "rate_limit is not supported by this exporter"),
    ({"basic_auth_users": {"u": "secret"}}, "basic_auth_users.u is not a bcrypt hash"),
    ({"basic_auth_users": {"a:b": HASH}}, "'a:b' is not a user name"),
    ({"tls_server_config": {"key_file": "k"}}, "tls_server_config needs cert_file"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "cert": "PEM"}},
     "tls_server_config.cert is not supported by this exporter: give the certificate as cert_file"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "cipher_suites": ["TLS_AES_128_GCM_SHA256"]}},
     "tls_server_config.cipher_suites is not supported"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "client_auth_type": "RequestClientCert"}},
     "client_auth_type RequestClientCert is not supported by this exporter"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "client_auth_type": "Sometimes"}},
     "client_auth_type 'Sometimes' is not one of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "client_ca_file": "ca"}},
     "has a client CA but client_auth_type NoClientCert does not ask for client certificates"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "client_auth_type": "RequireAndVerifyClientCert"}},
     "needs client_ca_file"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "client_ca_file": "ca",
                            "client_auth_type": "VerifyClientCertIfGiven", "client_allowed_sans": ["x"]}},
     "client_allowed_sans needs client_auth_type RequireAndVerifyClientCert"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "min_version": "SSL3"}},
     "min_version 'SSL3' is not one of TLS10, TLS11, TLS12, TLS13"),
    ({"http_server_config": {"headers": {"Set-Cookie": "a=b"}}}, "Set-Cookie cannot be set"),
    ({"http_server_config": {"headers": {"X-Frame-Options": "deny\r\nX-Injected: 1"}}}, "must be one line of text"),
])
def test_bad_web_configurations_are_named(raw, message):
    with pytest.raises(web.WebConfigError, match=re.escape(message)):
        web.parse_web_config(raw, "/d")


def _basic(user, password):
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


def test_basic_auth_takes_the_right_password_only_and_remembers_answers(tmp_path):
    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users:\n  prometheus: '%s'\n" % HASH)
    config = web.WebConfig(str(path))
    settings = config.current()
    assert config.authorized(settings, _basic("prometheus", "secret"))
    for header in (None, "", _basic("prometheus", "wrong"), _basic("nobody", "secret"), "Bearer x",
                   "Basic !!not base64!!", _basic("prometheus", "x" * 100)):
        assert not config.authorized(settings, header), header
    assert len(config.auth_cache) == 4  # kept by digest: the header's password is nowhere in it
    assert not any(b"secret" in key for key in config.auth_cache)


def test_the_file_is_read_again_when_it_changes_and_a_broken_one_is_an_error_until_fixed(tmp_path):
    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users: {}\n")
    config = web.WebConfig(str(path))
    first = config.current()
    assert config.current() is first  # unchanged: not parsed again
    path.write_text("basic_auth_users:\n  prometheus: '%s'\n" % HASH)
    os.utime(path, ns=(0, 10 ** 18))
    assert config.current()["users"] == {"prometheus": HASH.encode()}
    path.write_text("basic_auth_users: [\n")
    os.utime(path, ns=(0, 2 * 10 ** 18))
    with pytest.raises(web.WebConfigError, match="is not YAML"):
        config.current()


def test_the_content_to_check_is_checked_instead_of_the_file(tmp_path):
    with pytest.raises(web.WebConfigError, match="rate_limit is not supported"):
        web.WebConfig(str(tmp_path / "not_written_yet.yml"), '{"rate_limit": {"burst": 1}}')


def test_allowed_sans_match_any_subject_alternative_name():
    cert = {"subjectAltName": (("DNS", "prometheus"), ("IP Address", "10.0.0.1"))}
    assert web.allowed_san(cert, ["10.0.0.1"]) and web.allowed_san(cert, ["prometheus"])
    assert not web.allowed_san(cert, ["grafana"]) and not web.allowed_san(None, ["prometheus"])
