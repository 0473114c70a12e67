"""The queueadmin Django project: settings from the environment, URLs, WSGI entry point."""
