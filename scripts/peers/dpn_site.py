"""django-push-notifications as a site of its own, for `herald-bench peers`.

Its settings (DJANGO_SETTINGS_MODULE=dpn_site; the URLs are dpn_urls.py), served by gunicorn as
`django.core.wsgi:get_wsgi_application()`.
The device API is the package's own DRF viewset, unauthenticated (its cheapest form), with
UPDATE_ON_DUPLICATE_REG_ID so a POST of a known registration_id is an upsert, as Herald's
PUT api/register/{id} is. The database comes from the environment:
  DPN_DATABASE=sqlite:/path/db.sqlite3   (WAL, IMMEDIATE transactions: several workers may write)
  DPN_DATABASE=postgres://user@/db?host=/socket/dir&port=N
"""

import os
from urllib.parse import parse_qs, urlparse

SECRET_KEY = "herald-bench-peers"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "rest_framework",
    "push_notifications",
]
MIDDLEWARE = []
ROOT_URLCONF = "dpn_urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
}
PUSH_NOTIFICATIONS_SETTINGS = {"UPDATE_ON_DUPLICATE_REG_ID": True}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "ERROR"}}

_database = os.environ.get("DPN_DATABASE", "sqlite:/tmp/dpn.sqlite3")
if _database.startswith("sqlite:"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _database[len("sqlite:"):],
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    }
else:
    _url = urlparse(_database)
    _query = parse_qs(_url.query)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _url.path.lstrip("/"),
            "USER": _url.username or "",
            "HOST": _query.get("host", [_url.hostname or ""])[0],
            "PORT": _query.get("port", [str(_url.port or "")])[0],
            "CONN_MAX_AGE": None,
            # Its own schema, which herald-bench empties before each run.
            "OPTIONS": {"options": "-c search_path=dpn"},
        }
    }
