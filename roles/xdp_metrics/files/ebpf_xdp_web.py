# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The web side of the ebpf.xdp exporter (ebpf_xdp_exporter.py): the HTTP server and who may use it.

It knows nothing of metrics: it serves one WSGI application (the
exporter's) and keeps the network out of it.

- A threaded server: every connection has a thread of its own, at most
  max_connections at once (one more is answered 503, or closed unanswered
  over TLS, at once), and each has a deadline: a client that has not
  finished its request and read its answer within request_timeout seconds
  is cut off, however slowly it trickles bytes. A slow client cannot stop
  the scrapes of others.
- The web configuration of Prometheus' exporter-toolkit (--web.config.file,
  the format of node_exporter and every exporter built on the toolkit, see
  its docs/web-configuration.md): tls_server_config (cert_file, key_file,
  client_ca_file, client_auth_type, client_allowed_sans, min_version,
  max_version), http_server_config (headers) and basic_auth_users (user:
  bcrypt hash). Like the toolkit it is read again for every connection and
  request, here only when the file (or a file it names) changed, so that a
  renewed certificate or a new password is used without a restart.

Settings of the toolkit this server cannot honour (inline cert/key,
cipher_suites, curve_preferences, rate_limit, RequestClientCert,
RequireAnyClientCert: Python's ssl verifies every certificate it asks for)
are refused by name rather than ignored.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import hashlib
import logging
import os
import re
import socket
import socketserver
import ssl
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

LOG = logging.getLogger("ebpf_xdp_exporter")

TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")
TLS_KEYS = ("cert_file", "key_file", "client_ca_file", "client_ca", "client_auth_type", "client_allowed_sans",
            "min_version", "max_version", "prefer_server_cipher_suites")
UNSUPPORTED = {
    "rate_limit": "put a reverse proxy in front of the exporter to limit rates",
    "tls_server_config.cert": "give the certificate as cert_file",
    "tls_server_config.key": "give the key as key_file",
    "tls_server_config.cipher_suites": "OpenSSL's defaults are used; limit versions with min_version",
    "tls_server_config.curve_preferences": "OpenSSL's defaults are used",
}
HTTP_KEYS = ("http2", "headers")
HEADERS = ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "X-XSS-Protection",
           "Strict-Transport-Security")
TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH = {"": ssl.CERT_NONE, "NoClientCert": ssl.CERT_NONE,
               "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL, "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
BCRYPT_HASH = re.compile(r"^\$2[abxy]?\$[0-9]{2}\$[./A-Za-z0-9]{53}$")
# Checked against when the user is unknown, so that a wrong name costs as long as a wrong password
# (exporter-toolkit does the same): bcrypt of a password nobody has, cost 10.
DECOY_HASH = b"$2b$10$4rmnUfb4roK6V2eeu0ZWPudia3s.swGJNU1Tcyb05ftwIpioSNpzm"
# Answers of bcrypt kept (by a digest of user, hash and password, never the password itself): a scrape every
# few seconds must not cost ~70 ms of CPU each (cost 10).
AUTH_CACHE_SIZE = 256


class WebConfigError(Exception):
    """A web configuration the exporter cannot serve with; the message says what to change."""


# ---------------------------------------------------------------- the web configuration (exporter-toolkit's)


def _mapping(value, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError("%s must be a mapping" % where)
    return value


def _known(section: dict, keys: tuple, where: str) -> None:
    for key in section:
        name = "%s.%s" % (where, key) if where else key
        if name in UNSUPPORTED:
            raise WebConfigError("%s is not supported by this exporter: %s" % (name, UNSUPPORTED[name]))
        if key not in keys:
            raise WebConfigError("unknown setting %s; known: %s" % (name, ", ".join(keys)))


def parse_web_config(raw, directory: str) -> dict:
    """The checked settings of a web configuration (its YAML's value), relative paths joined onto directory
    (the configuration's own, as the toolkit does). No file is opened here: see WebConfig."""
    raw = _mapping(raw, "the web configuration")
    _known(raw, TOP_KEYS + ("rate_limit",), "")
    tls = _mapping(raw.get("tls_server_config"), "tls_server_config")
    _known(tls, TLS_KEYS + tuple(k.split(".", 1)[1] for k in UNSUPPORTED if "." in k), "tls_server_config")
    http = _mapping(raw.get("http_server_config"), "http_server_config")
    _known(http, HTTP_KEYS, "http_server_config")
    headers = _mapping(http.get("headers"), "http_server_config.headers")
    for name, value in headers.items():
        if name not in HEADERS:
            raise WebConfigError("http_server_config.headers: %s cannot be set; these can: %s"
                                 % (name, ", ".join(HEADERS)))
        if not isinstance(value, str) or "\n" in value or "\r" in value:
            raise WebConfigError("http_server_config.headers.%s must be one line of text" % name)
    users = _mapping(raw.get("basic_auth_users"), "basic_auth_users")
    for user, hashed in users.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise WebConfigError("basic_auth_users: %r is not a user name (text without ':')" % (user,))
        if not isinstance(hashed, str) or not BCRYPT_HASH.match(hashed):
            raise WebConfigError("basic_auth_users.%s is not a bcrypt hash (such as htpasswd -nBC 10 \"\" "
                                 "prints: $2y$10$ and 53 more characters); passwords are never given in clear"
                                 % user)
    out = {"tls": None, "users": {u: h.encode() for u, h in users.items()},
           "headers": [(name, value) for name, value in sorted(headers.items()) if value]}
    if tls:
        out["tls"] = _tls_settings(tls, directory)
    return out


def _tls_settings(tls: dict, directory: str) -> dict:
    def path(key):
        value = tls.get(key)
        if value in (None, ""):
            return None
        if not isinstance(value, str):
            raise WebConfigError("tls_server_config.%s must be a file name" % key)
        return os.path.join(directory, value)

    settings = {"cert_file": path("cert_file"), "key_file": path("key_file"), "client_ca_file": path("client_ca_file"),
                "client_ca": tls.get("client_ca") or None}
    for key in ("cert_file", "key_file"):
        if not settings[key]:
            raise WebConfigError("tls_server_config needs %s" % key)
    auth = tls.get("client_auth_type") or ""
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise WebConfigError("tls_server_config.client_auth_type %s is not supported by this exporter (a client "
                             "certificate is always verified here): use RequireAndVerifyClientCert with "
                             "client_ca_file" % auth)
    if auth not in CLIENT_AUTH:
        raise WebConfigError("tls_server_config.client_auth_type %r is not one of %s"
                             % (auth, ", ".join(k for k in CLIENT_AUTH if k)))
    has_ca = bool(settings["client_ca_file"] or settings["client_ca"])
    if has_ca and CLIENT_AUTH[auth] == ssl.CERT_NONE:
        # The toolkit's rule too: a CA that is never asked for is a mistake, not a policy.
        raise WebConfigError("tls_server_config has a client CA but client_auth_type %s does not ask for client "
                             "certificates: set client_auth_type to RequireAndVerifyClientCert"
                             % (auth or "NoClientCert"))
    if CLIENT_AUTH[auth] != ssl.CERT_NONE and not has_ca:
        raise WebConfigError("tls_server_config.client_auth_type %s needs client_ca_file, the CA that signs the "
                             "clients' certificates" % auth)
    settings["verify_mode"] = CLIENT_AUTH[auth]
    sans = tls.get("client_allowed_sans")
    if sans is not None:
        if not isinstance(sans, list) or not all(isinstance(s, str) for s in sans):
            raise WebConfigError("tls_server_config.client_allowed_sans must be a list of names")
        if CLIENT_AUTH[auth] != ssl.CERT_REQUIRED:
            raise WebConfigError("tls_server_config.client_allowed_sans needs client_auth_type "
                                 "RequireAndVerifyClientCert")
    settings["allowed_sans"] = sans
    for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        value = tls.get(key) or default
        if value not in TLS_VERSIONS:
            raise WebConfigError("tls_server_config.%s %r is not one of %s" % (key, value, ", ".join(TLS_VERSIONS)))
        settings[key] = TLS_VERSIONS[value]
    settings["prefer_server_cipher_suites"] = tls.get("prefer_server_cipher_suites", True) is not False
    return settings


def ssl_context(settings: dict) -> ssl.SSLContext:
    """The server's TLS context from tls settings (parse_web_config), its files read now."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = settings["min_version"]
    context.maximum_version = settings["max_version"]
    if settings["prefer_server_cipher_suites"]:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    try:
        context.load_cert_chain(settings["cert_file"], settings["key_file"])
    except (OSError, ssl.SSLError) as exc:
        raise WebConfigError("tls_server_config: cannot load cert_file %s with key_file %s: %s"
                             % (settings["cert_file"], settings["key_file"], getattr(exc, "strerror", None) or exc))
    if settings["client_ca_file"] or settings["client_ca"]:
        try:
            context.load_verify_locations(cafile=settings["client_ca_file"], cadata=settings["client_ca"])
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError("tls_server_config: cannot load the client CA %s: %s"
                                 % (settings["client_ca_file"] or "client_ca", getattr(exc, "strerror", None) or exc))
    context.verify_mode = settings["verify_mode"]
    return context


def _load_yaml(text: str):
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise WebConfigError("the Python module yaml is missing: install python3-yaml")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WebConfigError("the web configuration is not YAML: %s" % exc)


def _bcrypt():
    try:
        import bcrypt  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise WebConfigError("basic_auth_users needs the Python module bcrypt: install python3-bcrypt")
    return bcrypt


class WebConfig:
    """A web configuration file, read again when it or a file it names changed (checked on every use)."""

    def __init__(self, path: str, text: str | None = None):
        """path: the file; text: its content to check instead of reading the file (the role's check before it
        writes it)."""
        self.path = path
        self.text = text
        self.lock = threading.Lock()
        self.stamp = None
        self.settings = None
        self.context = None
        self.error = None
        self.auth_cache: dict[bytes, bool] = {}
        self.bcrypt_lock = threading.Lock()
        self.current()
        if self.error:
            raise self.error

    @staticmethod
    def _stat(path):
        try:
            info = os.stat(path)
        except OSError:
            return None
        return info.st_ino, info.st_size, info.st_mtime_ns

    def _stamp(self, settings) -> tuple:
        files = [self.path]
        if settings and settings["tls"]:
            files += [settings["tls"][k] for k in ("cert_file", "key_file", "client_ca_file")]
        return tuple(self._stat(f) for f in files if f)

    def current(self) -> dict:
        """The settings (with "context", the TLS context, or None), read again if a file changed since; raises
        WebConfigError while the configuration is broken (a request then gets 500, a handshake fails)."""
        with self.lock:
            if self.stamp is None or self.text is None and self._stamp(self.settings) != self.stamp:
                self._load()
            if self.error:
                raise self.error
            return self.settings

    def _load(self) -> None:
        stamp = self._stamp(None)
        try:
            if self.text is None:
                try:
                    with open(self.path, encoding="utf-8") as src:
                        text = src.read()
                except OSError as exc:
                    raise WebConfigError("cannot read the web configuration %s: %s" % (self.path, exc.strerror))
            else:
                text = self.text
            settings = parse_web_config(_load_yaml(text), os.path.dirname(os.path.abspath(self.path)))
            if settings["users"]:
                _bcrypt()
            settings["context"] = ssl_context(settings["tls"]) if settings["tls"] else None
            stamp = self._stamp(settings)
        except WebConfigError as exc:
            if self.error is None or str(exc) != str(self.error):
                LOG.error("web configuration %s: %s", self.path, exc)
            self.error = WebConfigError("web configuration %s: %s" % (self.path, exc))
            self.settings, self.stamp = None, stamp
            return
        if self.settings is not None:
            LOG.info("web configuration %s read again", self.path)
        self.settings, self.stamp, self.error = settings, stamp, None
        self.auth_cache = {}

    def authorized(self, settings: dict, header: str | None) -> bool:
        """Whether the Authorization header names a user of basic_auth_users with the right password."""
        if not settings["users"]:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _sep, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        hashed = settings["users"].get(user)
        key = hashlib.sha256(b"\0".join((user.encode(), hashed or b"", password.encode()))).digest()
        answer = self.auth_cache.get(key)
        if answer is None:
            # One bcrypt at a time: a burst of wrong passwords costs one core, not all of them.
            with self.bcrypt_lock:
                try:
                    answer = _bcrypt().checkpw(password.encode(), hashed or DECOY_HASH) and hashed is not None
                except ValueError:  # bcrypt 5 refuses passwords longer than bcrypt's 72 bytes
                    answer = False
            if len(self.auth_cache) >= AUTH_CACHE_SIZE:
                self.auth_cache.clear()
            self.auth_cache[key] = answer
        return answer


def allowed_san(cert: dict | None, allowed: list) -> bool:
    """Whether a verified client certificate (SSLSocket.getpeercert()) has one of the allowed SANs."""
    names = [value for _kind, value in (cert or {}).get("subjectAltName", ())]
    return any(name in allowed for name in names)


def guard(app, web: WebConfig | None):
    """app behind basic_auth_users and with http_server_config's headers (a WSGI middleware)."""
    if web is None:
        return app

    def guarded(environ, start_response):
        try:
            settings = web.current()
        except WebConfigError:
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [b"Internal Server Error\n"]
        headers = settings["headers"]
        if not web.authorized(settings, environ.get("HTTP_AUTHORIZATION")):
            start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("WWW-Authenticate", "Basic")]
                           + headers)
            return [b"Unauthorized\n"]

        def with_headers(status, response_headers, exc_info=None):
            return start_response(status, list(response_headers) + headers, exc_info)
        return app(environ, with_headers)
    return guarded


# ---------------------------------------------------------------- the server


class ListenError(Exception):
    """The address cannot be listened on; the message says why."""


class _Handler(WSGIRequestHandler):
    def setup(self):
        self.timeout = self.server.request_timeout  # each read and write; the deadline bounds their sum
        with self.server.deadlines_lock:
            self.deadline = self.server.deadlines.get(self.request, (time.monotonic() + self.timeout, None))[0]
        settings = self.server.web.current() if self.server.web else None
        if settings and settings["context"]:
            self.request.settimeout(self.timeout)
            self.request = settings["context"].wrap_socket(self.request, server_side=True)
            allowed = settings["tls"]["allowed_sans"]
            if allowed is not None and not allowed_san(self.request.getpeercert(), allowed):
                raise ssl.SSLError("the client certificate has none of client_allowed_sans")
        super().setup()

    def parse_request(self):
        # A request cut at its deadline ends there: its headers read so far are not served (the thread and
        # its slot are free at once, not after a collection nobody will read).
        return super().parse_request() and time.monotonic() < self.deadline

    def get_environ(self):
        environ = super().get_environ()
        if isinstance(self.request, ssl.SSLSocket):
            environ["HTTPS"], environ["wsgi.url_scheme"] = "on", "https"
        return environ

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


class Server(socketserver.ThreadingMixIn, WSGIServer):
    """A WSGI server with a thread per connection, a cap on connections and a deadline on each (module
    docstring)."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64

    def __init__(self, address, handler, max_connections: int, request_timeout: float, web: WebConfig | None):
        self.slots = threading.BoundedSemaphore(max_connections)
        self.request_timeout = request_timeout
        self.web = web
        self.deadlines: dict[socket.socket, tuple] = {}  # connection -> (when it is cut, a dup of it)
        self.deadlines_lock = threading.Lock()
        self.refused = 0
        super().__init__(address, handler)

    def serve_forever(self, poll_interval=0.5):
        threading.Thread(target=self._cut_late_connections, name="deadlines", daemon=True).start()
        super().serve_forever(poll_interval)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            self._refuse(request)
            return
        try:
            # A second descriptor of the connection: shut down from the deadlines thread, it ends whatever
            # the handler waits for, TLS or not, without touching the handler's socket object.
            watch = socket.fromfd(request.fileno(), request.family, request.type)
            with self.deadlines_lock:
                self.deadlines[request] = (time.monotonic() + self.request_timeout, watch)
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)
            self.slots.release()

    def _forget(self, request) -> None:
        with self.deadlines_lock:
            _deadline, watch = self.deadlines.pop(request, (None, None))
        if watch is not None:
            watch.close()

    def _refuse(self, request) -> None:
        """Beyond the cap: answered at once (never waited on), in plain HTTP where the server speaks it."""
        with contextlib.suppress(OSError, WebConfigError):
            settings = self.web.current() if self.web else None
            if not (settings and settings["context"]):
                request.setblocking(False)
                request.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n"
                             b"Connection: close\r\n\r\n")
        self.shutdown_request(request)

    def _cut_late_connections(self) -> None:
        while True:
            time.sleep(min(0.25, self.request_timeout / 4))
            now = time.monotonic()
            with self.deadlines_lock:
                late = [watch for deadline, watch in self.deadlines.values() if deadline <= now]
            for watch in late:
                # The handler's blocked read or write returns, and its thread ends.
                with contextlib.suppress(OSError):
                    watch.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request, client_address):
        # A client that went away, a failed handshake or a cut deadline: one line, no traceback.
        LOG.debug("request from %s failed", client_address, exc_info=True)


def make_server(address: str, port: int, max_connections: int, request_timeout: float, web: WebConfig | None):
    """A Server bound to address:port (bind errors as ListenError, worded for the role's variables)."""
    where = "[%s]:%d" % (address, port) if ":" in address else "%s:%d" % (address, port)
    try:
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise ListenError("listen_address %r cannot be resolved: %s" % (address, exc))
    server_class = type("BoundServer", (Server,), {"address_family": family})
    try:
        return server_class((address, port), _Handler, max_connections, request_timeout, web)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ListenError("cannot listen on %s: the port is in use by another process; "
                              "choose another port (xdp_metrics_port)" % where)
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ListenError("cannot listen on %s: no interface in this network namespace has that address "
                              "(xdp_metrics_listen_address)" % where)
        raise ListenError("cannot listen on %s: %s" % (where, exc.strerror or exc))
