"""WSGI entry point for gunicorn: `gunicorn queueadmin.wsgi:application`."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")

application = get_wsgi_application()
