"""WSGI entry point (management and plain HTTP servers); the product runs under ASGI."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
application = get_wsgi_application()
