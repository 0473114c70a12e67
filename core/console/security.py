"""Security headers on every response (static files too), `Cache-Control: no-store` on every
response that sets no caching of its own (every page), and Secure cookies when the request
came over HTTPS.

The Content-Security-Policy allows scripts and styles from our own origin only: no inline
script, no inline style (htmx is told not to inject its indicator style, see base.html), no
eval; charts and progress bars are SVG attributes, not style attributes.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

CSP = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])


class SecurityHeadersMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        # Static files (whitenoise answers them before XFrameOptionsMiddleware runs) too.
        response.headers.setdefault("X-Frame-Options", "DENY")
        # A page holds what its viewer may see: no cache keeps it (a shared proxy, the back
        # button after logout). Static files say how they may be cached themselves.
        response.headers.setdefault("Cache-Control", "no-store")
        if request.is_secure():
            # Served over HTTPS (directly, or behind a proxy that SECURE_PROXY_SSL_HEADER
            # trusts): the session and CSRF cookies never travel over plain HTTP.
            for name in (settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME):
                if name in response.cookies:
                    response.cookies[name]["secure"] = True
        return response
