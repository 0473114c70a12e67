"""Django settings, read from environment variables only (and only here).

REDIS_URL      Redis for the queue (default: the project-managed redis-server on port 6390)
QUEUE_PREFIX   prefix of every queue key (default "qa")
QA_MAX_RESULT_BYTES  largest handler result a worker keeps, as JSON (default 65536); past it
               the task is dead-lettered (docs/results.md)
DATABASE_URL   any dj-database-url URL (default: SQLite in var/db.sqlite3; postgres://... works)
SECRET_KEY     default: generated once and kept in var/secret_key, so sessions survive restarts
DEBUG          "1" or "true" to turn on (default off)
ALLOWED_HOSTS  comma-separated (default localhost,127.0.0.1)
HOST, PORT     where `runstack` serves the console (default 127.0.0.1:8000)
QA_ACCESS_LOG  the console's access log under `runstack`: "-" for its output, or a file (default
               none: every page polls every few seconds, which buried the workers' lines)
QA_ADMIN_PASSWORD  password `runstack` gives the "admin" user (default: generated, kept in
               var/admin_password)
QA_VAR_DIR     where local state lives (default: var/ in the checkout; installed from a wheel,
               var/ in the current directory)
QA_REDIS_PORT  port of the embedded redis-server (default 6390)
QA_REDIS_FSYNC appendfsync of the embedded redis-server: always (default) or everysec
QA_HANDLER_MODULES  comma-separated modules whose import registers task handlers, loaded by
               every `runworker` (besides core.worker.builtins and, for data jobs,
               core.pipeline.tasks)
QA_REDIS_OTEL_METRICS  "1": redis-py imported as it is, its own OpenTelemetry metrics available
               (read by core/queue/redispy.py when the engine is imported, before any setting:
               the engine imports redis-py without them otherwise)
QA_HANDLER_METRICS  "off": the engine keeps no per-handler metrics for this process's acks,
               fails and reaps (default on; see docs/console.md, Handlers)
METRICS_TOKEN  bearer token that /metrics requires (unset: /metrics answers 404)
QA_API_RATE_PER_MIN  calls a minute one HTTP API token may make (default 600; 0: no limit)
QA_API_WAIT_MAX_S  the longest `?wait=` an API call may hold a server thread (default 20)
QA_API_WAITERS  `?wait=` calls one console process holds at once; past it a 429 (default 4)
QA_SECURE_COOKIES  "1": session and CSRF cookies only over HTTPS even when Django sees plain
               HTTP (behind a TLS proxy that sets no X-Forwarded-Proto); they are Secure
               anyway whenever the request came over HTTPS
QA_TRUST_X_FORWARDED_PROTO  "1": behind a proxy that sets X-Forwarded-Proto, trust it (else
               neither Django nor the stack's gunicorn believes the header)
QA_TRUST_X_FORWARDED_FOR  "1": behind one proxy that appends the caller's address to
               X-Forwarded-For, count failed logins by that address (else by the peer's)
QA_LOGIN_FAILURE_LIMIT  failed logins, per user name and address (and, from an address the
               name never logged in from, per name and per address), before logging in is
               locked (default 5)
QA_LOGIN_LOCKOUT_MIN  minutes a lockout lasts, counted from the last failure before it
               (default 15); an admin can unlock sooner
QA_LOGIN_KNOWN_DAYS  days a successful login keeps its address "known" for that user name:
               only the name's own failures there lock it out (default 90)
QA_CONSOLE_CACHE_S  seconds the console shares per-queue aggregates between requests (1)
QA_CONSOLE_URL the console's address as people reach it, for the links in alerts (default
               http://HOST:PORT); QA_ALERT_EVERY_S: seconds between the alerts' evaluations (5)
QA_ALERT_SEND_TIMEOUT_S  seconds one attempt to send an alert may take, connect and answer
               (10); a message whose sender died mid-send is sent again after 3 times that
EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS, EMAIL_USE_SSL,
DEFAULT_FROM_EMAIL  the SMTP server of the alerts' email channels (Django's settings of the
               same names; default localhost:25, from queueadmin@localhost)
QA_RETAIN_REQUESTS, QA_RETAIN_DEAD, QA_RETAIN_SEARCH, QA_RETAIN_AUDIT, QA_RETAIN_BULK,
QA_RETAIN_DATAJOBS, QA_RETAIN_HANDLER_MINUTES, QA_RETAIN_HANDLER_HOURS  how long the database
               keeps each kind of history: 30d, 12h, 90s or "forever" (defaults: 30d, 30d,
               30d, 365d, 90d, 90d, 25h, 90d; docs/retention.md); an admin's setting from the
               console or `manage.py retention set` wins
QA_PRUNE_EVERY_S  seconds between the services process's pruning passes (default 60)
QA_AUDIT_EXPORT  folder the pruner writes the audit entries it removes into, as JSON lines, one
               file per month (default var/audit); "off": removed without a copy
SPARK_REMOTE   the Spark Connect server the workers run data jobs on, sc://host:15002 (default:
               the stack's own, started by `runstack` on 127.0.0.1:QA_SPARK_PORT)
SPARK_MASTER   instead, a classic Spark session in each worker: local[N] or a standalone
               master spark://host:7077 (SPARK_REMOTE wins when both are set)
QA_SPARK       "off": no Spark at all (the stack starts none, workers run no data jobs)
QA_SPARK_PORT  port of the stack's Spark Connect server (default 15390)
QA_SPARK_MEMORY  the stack's Spark server's driver memory (default 1g)
QA_SPARK_CLASSES  a class archive the Spark JVMs map (made by `manage.py sparkclasses`): they
               start in about half the time, for ~150 MiB more memory (default: none)
QA_DATAJOB_CONCURRENCY  chunks of one data job that run at once unless its --concurrency says
               otherwise (default: this machine's cores with the stack's own Spark, whose
               local[*] has no more; else no limit)
QA_DATA_ROOTS  comma-separated folders (or URL prefixes) data jobs may read (default:
               var/sample,var/data); outputs are readable too
QA_OUTPUT_ROOTS  comma-separated folders data jobs may write into (default: var/out)
QA_CHECK_CACHE  the folder where `datajob submit` keeps the answers of its checks, so that a
               job submitted again over the same files is checked without reading their
               metadata or parsing its SQL again (default var/cache/checks); "off": none kept
QA_COMMAND_SERVER  "off": `runstack` runs no operator's command for the command line (by
               default a command such as `datajob submit` or `queuestat`, typed where the
               stack runs with the same settings, is run by a fork of the stack's supervisor,
               which has Python and Django loaded: 0.3-0.45 s sooner; docs/operations.md)
SPARK_SHUFFLE_PARTITIONS  spark.sql.shuffle.partitions of the workers' sessions (default:
               the cores of local[N] / local[*], else 8; chunks are small; raise it for big
               combine steps on a cluster)
SPARK_UI       "1": the Spark UI of each worker's session on (default off)
SPARK_CONF     more Spark settings for the workers' sessions, key=value entries separated by
               ';' or new lines: spark.driver.memory=8g;spark.executor.memory=4g
"""

from __future__ import annotations

import functools
import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import lazy

# Where the queueadmin and core packages are: a checkout, or site-packages when installed.
BASE_DIR = Path(__file__).resolve().parent.parent
# Run from a checkout (manage.py and pyproject.toml beside the packages), not from a wheel.
SOURCE_CHECKOUT = (BASE_DIR / "manage.py").is_file() and (BASE_DIR / "pyproject.toml").is_file()
# Where the project's own child processes (the stack's services, Spark's Python workers) must
# import it from, ahead of anything else: the checkout (not an editable install of another
# one); nothing extra when installed.
CODE_PATH = str(BASE_DIR) if SOURCE_CHECKOUT else ""
# Local state: SQLite database, secret key, admin password, embedded Redis data, static files,
# Spark's scratch and jar, sample data. A checkout's own var/; installed, the current
# directory's (never site-packages).
VAR_DIR = Path(os.environ.get("QA_VAR_DIR")
               or (BASE_DIR if SOURCE_CHECKOUT else Path.cwd()) / "var").resolve()
if not (SOURCE_CHECKOUT or os.environ.get("QA_VAR_DIR")) and (
        str(VAR_DIR) == "/var" or VAR_DIR.is_relative_to(BASE_DIR)):
    # Run from / (a service manager's default working directory) the default would be the
    # system's /var, whose mode `runstack` makes its user's only; or it would be inside
    # site-packages, which the next upgrade replaces.
    raise ImproperlyConfigured(
        f"queueadmin keeps its state in ./var, here {VAR_DIR}: set QA_VAR_DIR to a directory "
        "of its own, or run it from one")


def _assets(name: str) -> Path:
    """The console's templates/ or static/: inside the package when installed from a wheel
    (setup.py maps them there), at the checkout's top level otherwise."""
    packaged = Path(__file__).resolve().parent / name
    return packaged if packaged.is_dir() else BASE_DIR / name


def _package_dir(name: str, sub: str) -> list[Path]:
    """`sub` of an installed package's folder, found without importing the package (none
    if the package or the folder is missing)."""
    import importlib.util

    found = importlib.util.find_spec(name)
    places = list(found.submodule_search_locations or []) if found is not None else []
    return [Path(p) / sub for p in places[:1] if (Path(p) / sub).is_dir()]


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true"}


def _env_list(name: str, default: str) -> list[str]:
    return [h.strip() for h in os.environ.get(name, default).split(",") if h.strip()]


def _env_int(name: str, default: int) -> int:
    """A whole number from the environment; one that is not names its variable (queueadmin's
    command says it in one line, exit status 2)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}") from None


def _env_seconds(name: str, default: float, least: float) -> float:
    """Seconds from the environment, at least `least`; anything else names its variable."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not least <= seconds < float("inf"):  # NaN too
        raise ImproperlyConfigured(
            f"{name} must be a number of seconds, at least {least:g}, not {value!r}")
    return seconds


def _stored_secret_key(path: Path) -> str:
    """The key kept in `path`, created on first use (in a directory only its owner may enter,
    when it makes it). Written to a temporary file and linked into place, so concurrent first
    starts (gunicorn workers) all end up with the one key."""
    if not path.exists():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ImproperlyConfigured(
                f"cannot create QA_VAR_DIR={path.parent} ({exc.strerror}): run queueadmin from a "
                "directory it may write in, or set QA_VAR_DIR (or SECRET_KEY)") from exc
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process won the race: use its key
        finally:
            tmp.unlink()
    if path.stat().st_mode & 0o077:  # a key file from before it was kept private
        path.chmod(0o600)
    return path.read_text().strip()


# Read, or made, when something first signs with it (a login, a session), not at import: a
# command that signs nothing (submit, queuestat, help, a refused runstack) leaves no var/
# behind in the directory it ran in. Once per process.
SECRET_KEY = os.environ.get("SECRET_KEY") or lazy(
    functools.cache(functools.partial(_stored_secret_key, VAR_DIR / "secret_key")), str)()
DEBUG = _env_flag("DEBUG")
ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", "localhost,127.0.0.1")

# The queue. Without REDIS_URL in the environment, the project-managed redis-server that
# `runstack` (make run) starts on EMBEDDED_REDIS_PORT is used.
EMBEDDED_REDIS_PORT = _env_int("QA_REDIS_PORT", 6390)
# Checked by `runstack`, which refuses anything but "always" and "everysec" with a message.
EMBEDDED_REDIS_FSYNC = os.environ.get("QA_REDIS_FSYNC", "").strip() or "always"
EMBEDDED_REDIS = not os.environ.get("REDIS_URL")
REDIS_URL = os.environ.get("REDIS_URL") or f"redis://127.0.0.1:{EMBEDDED_REDIS_PORT}/0"
QUEUE_PREFIX = os.environ.get("QUEUE_PREFIX") or "qa"
QUEUE_MAX_RESULT_BYTES = _env_int("QA_MAX_RESULT_BYTES", 65536)
HANDLER_METRICS = os.environ.get("QA_HANDLER_METRICS", "").strip().lower() != "off"

# The data pipeline's Spark (core/pipeline/spark_target.py reads these when a worker makes its
# session; neither SPARK_REMOTE nor SPARK_MASTER: the stack's own Connect server,
# core/pipeline/server.py).
SPARK_MASTER = os.environ.get("SPARK_MASTER", "").strip()
SPARK_REMOTE = os.environ.get("SPARK_REMOTE", "").strip()
SPARK_OFF = os.environ.get("QA_SPARK", "").strip().lower() == "off"
EMBEDDED_SPARK = not (SPARK_REMOTE or SPARK_MASTER or SPARK_OFF)
# The modules whose import registers task handlers (and data jobs' transforms), loaded by every
# worker besides core.worker.builtins, and by `datajob submit` for transforms: the data jobs'
# handler (unless QA_SPARK=off), then QA_HANDLER_MODULES. Nothing else is imported behind the
# worker's back.
QUEUEADMIN_HANDLER_MODULES = [*([] if SPARK_OFF else ["core.pipeline.tasks"]),
                              *_env_list("QA_HANDLER_MODULES", "")]
SPARK_CONNECT_PORT = _env_int("QA_SPARK_PORT", 15390)
SPARK_MEMORY = os.environ.get("QA_SPARK_MEMORY", "").strip() or "1g"
# A class archive the Spark JVMs map (core/pipeline/classes.py), made by `manage.py
# sparkclasses`: off by default, as it costs more memory than it saves time for a stack that
# starts Spark once (the test suite starts dozens: `make test` makes one and uses it).
SPARK_CLASS_ARCHIVE = (Path(os.environ["QA_SPARK_CLASSES"].strip())
                       if os.environ.get("QA_SPARK_CLASSES", "").strip() else None)
# More chunks of one job at once than the embedded Spark has cores only makes each slower (a
# 40M-row job on 2 cores: 2.9-4.2 s at 2 at once, 4.9-8.4 s at 4); the other slots stay free
# for other jobs' chunks.
DATAJOB_CONCURRENCY = _env_int("QA_DATAJOB_CONCURRENCY", 0) or (
    os.cpu_count() or 1 if EMBEDDED_SPARK else 1_000_000)
SPARK_SHUFFLE_PARTITIONS = _env_int("SPARK_SHUFFLE_PARTITIONS", 0)  # 0: by master
SPARK_UI = _env_flag("SPARK_UI")
SPARK_CONF = os.environ.get("SPARK_CONF", "")  # parsed (and refused) by core.pipeline.spark_target

# Where data jobs may read and write (core/pipeline/roots.py): never var/ itself, which holds
# the secret key, the admin password and the database.
DATA_ROOTS = _env_list("QA_DATA_ROOTS", f"{VAR_DIR / 'sample'},{VAR_DIR / 'data'}")
OUTPUT_ROOTS = _env_list("QA_OUTPUT_ROOTS", str(VAR_DIR / "out"))
# What data jobs' submit-time checks found (core/pipeline/checkcache.py); None: nothing kept.
_check_cache = os.environ.get("QA_CHECK_CACHE", "").strip()
CHECK_CACHE_DIR = (None if _check_cache.lower() == "off"
                   else Path(_check_cache) if _check_cache else VAR_DIR / "cache" / "checks")

# The supervisor (`runstack`).
# Whether it runs the operators' commands for the command line (core/stack/commands.py).
COMMAND_SERVER = os.environ.get("QA_COMMAND_SERVER", "").strip().lower() not in (
    "off", "0", "no", "false")
WEB_HOST = os.environ.get("HOST") or "127.0.0.1"
WEB_PORT = _env_int("PORT", 8000)
ACCESS_LOG = os.environ.get("QA_ACCESS_LOG", "").strip()
QA_ADMIN_PASSWORD = os.environ.get("QA_ADMIN_PASSWORD", "")

INSTALLED_APPS = [
    # The admin's modules are imported by the URLconf (queueadmin/urls.py), not at every
    # start: a management command such as `datajob submit` answers a fifth of a second sooner.
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    # django-ninja (the HTTP API, core/api) is not an app here: its templates and static
    # files (Swagger UI's, served from our own static files, never from a CDN) are found in
    # its folders below (_package_dir), and the URLconf imports it. As an app, every command
    # imported it and pydantic at Django's setup: half of the setup's imports, 0.1-0.2 s of
    # each `datajob submit` (issue 39).
    "core",
    # Login throttling (django-axes): after core, so that core's receiver of a failed login
    # runs before axes' own and sees whether the login was refused for an earlier lockout.
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outside the session and CSRF middleware, so it sees (and secures) the cookies they set.
    "core.console.security.SecurityHeadersMiddleware",
    # Under /api/: Django's own error pages (no such endpoint, a method it does not take, a
    # body too big) as JSON, as the API's answers are.
    "core.api.errors.JsonErrors",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every page needs a login; /healthz, /metrics (its own token) and the login page opt out.
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "core.console.errors.RedisDownMiddleware",
    # Last, as django-axes asks: turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    # Refuses every login while its user name or its address is locked out (django-axes).
    "core.console.login.LoginThrottle",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "queueadmin.urls"
WSGI_APPLICATION = "queueadmin.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [_assets("templates"), *_package_dir("ninja", "templates")],
        "APP_DIRS": True,  # template_partials swaps this for its own (cached) loaders
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # `spark_warming`: read only by the pages that show it (core/console/warming.py)
                "core.console.warming.context",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
        conn_max_age=60,
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's, which makes the database's folder (QA_VAR_DIR) when it first opens it.
    DATABASES["default"]["ENGINE"] = "queueadmin.sqlite"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LOGIN_URL = "core:login"
LOGIN_REDIRECT_URL = "core:overview"
LOGOUT_REDIRECT_URL = "core:login"

# Cookies: HttpOnly (the CSRF token reaches htmx through hx-headers, not JavaScript reading
# the cookie) and SameSite=Lax; Secure when QA_SECURE_COOKIES says so, and in any case on a
# response to a request that came over HTTPS (core.console.security).
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _env_flag("QA_SECURE_COOKIES")
if _env_flag("QA_TRUST_X_FORWARDED_PROTO"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"

# Login throttling (django-axes; core/console/login.py): QA_LOGIN_FAILURE_LIMIT failed logins
# of one user name from one address lock that pair out for QA_LOGIN_LOCKOUT_MIN minutes. A name
# logging in from an address it logged in from within QA_LOGIN_KNOWN_DAYS is locked by that
# pair only: a guesser elsewhere, or at other names, cannot lock it out. Any other attempt is
# also locked by the name's failures from every address and the address' failures for every
# name. The attempts refused meanwhile neither count nor extend it, and a successful login
# does not clear an address' count (an account holder cannot reset it between guesses at other
# accounts). An admin unlocks sooner in the Django admin (Access attempts), or with
# `manage.py axes_reset_username NAME` / `axes_reset_ip IP`; both are audited, and so is every
# failed login.
AXES_FAILURE_LIMIT = int(os.environ.get("QA_LOGIN_FAILURE_LIMIT") or "5")
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("QA_LOGIN_LOCKOUT_MIN") or "15"))
AXES_LOCKOUT_PARAMETERS = "core.console.login.lockout_parameters"
LOGIN_KNOWN_ADDRESS_DAYS = float(os.environ.get("QA_LOGIN_KNOWN_DAYS") or "90")
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = False
AXES_LOCKOUT_CALLABLE = "core.console.login.locked_out"
AXES_CLIENT_IP_CALLABLE = "core.console.login.client_address"
AXES_HANDLER = "core.console.login.AuditedAxesHandler"
AXES_ENABLE_ADMIN = False  # core/admin.py registers its models, with every change audited
AXES_VERBOSE = False  # the audit log has each failed login already
TRUST_X_FORWARDED_FOR = _env_flag("QA_TRUST_X_FORWARDED_FOR")

# The console.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
CONSOLE_CACHE_S = float(os.environ.get("QA_CONSOLE_CACHE_S") or "1")
# How often a page's live part asks again (htmx polling, while the tab is visible).
CONSOLE_POLL_S = _env_seconds("QA_CONSOLE_POLL_S", 3, 0.5)
# The HTTP API (core/api, docs/api.md).
API_RATE_PER_MIN = _env_int("QA_API_RATE_PER_MIN", 600)
API_WAIT_MAX_S = float(os.environ.get("QA_API_WAIT_MAX_S") or "20")
# How many `?wait=` calls one console process holds at once (the stack's gunicorn has eight
# threads): past it a wait is answered 429, so that waits never take every thread.
API_WAITERS = max(1, _env_int("QA_API_WAITERS", 4))
# Tracing (core/tracing, docs/tracing.md): a request page links its trace id to this URL, whose
# "{trace_id}" becomes the id (e.g. https://jaeger.example/trace/{trace_id}); "" = no link.
TRACING_UI_URL = os.environ.get("QA_TRACING_UI_URL", "").strip()
# Alerts (core.alerts, docs/alerts.md): links in messages, how often rules are evaluated, and
# the SMTP server of email channels (Django's email settings, from the environment).
CONSOLE_URL = (os.environ.get("QA_CONSOLE_URL", "").strip().rstrip("/")
               or f"http://{WEB_HOST}:{WEB_PORT}")
ALERT_EVERY_S = float(os.environ.get("QA_ALERT_EVERY_S") or "5")
ALERT_SEND_TIMEOUT_S = max(1, _env_int("QA_ALERT_SEND_TIMEOUT_S", 10))
EMAIL_HOST = os.environ.get("EMAIL_HOST", "").strip() or "localhost"
EMAIL_PORT = _env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS, EMAIL_USE_SSL = _env_flag("EMAIL_USE_TLS"), _env_flag("EMAIL_USE_SSL")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "").strip() or "queueadmin@localhost"
# Retention (core.mirror.retention, docs/retention.md): each kind's raw value, parsed (and
# refused with its variable's name) where it is used, not here.
RETENTION = {kind: os.environ.get(f"QA_RETAIN_{kind.upper().replace('-', '_')}", "").strip()
             for kind in ("requests", "dead", "search", "audit", "bulk", "datajobs",
                          "handler-minutes", "handler-hours")}
PRUNE_EVERY_S = _env_int("QA_PRUNE_EVERY_S", 60)
AUDIT_EXPORT = os.environ.get("QA_AUDIT_EXPORT", "").strip() or str(VAR_DIR / "audit")
# One process's cache of the per-queue aggregates (core.console.aggregates).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [_assets("static"), *_package_dir("ninja", "static")]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Compressed but not hashed: the manifest variant makes every template that uses
    # {% static %} fail until collectstatic has run (tests, a fresh checkout).
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # One line per event; the worker's lines carry queue=, request=, task= and worker= fields.
    "formatters": {"line": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line"}},
    # A refused request (4xx) is one line, without the traceback Django attaches to it.
    "filters": {"client_errors": {"()": "core.console.errors.ClientErrorLines"}},
    "root": {"handlers": ["console"], "level": "INFO" if DEBUG else "WARNING"},
    "loggers": {"queueadmin": {"level": "INFO"},
                "django.request": {"filters": ["client_errors"]},
                # (a logger's filters see only what is logged to it, not to its children)
                **{f"django.security.{kind}": {"filters": ["client_errors"]} for kind in (
                    "RequestDataTooBig", "TooManyFieldsSent", "TooManyFilesSent",
                    "DisallowedHost")}},
}
