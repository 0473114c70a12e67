from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.contrib.staticfiles import finders
from django.http import FileResponse, Http404, HttpRequest
from django.urls import include, path
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe

admin.autodiscover()  # here, not at start-up: see INSTALLED_APPS


@login_not_required  # a browser asks for it before anyone logs in, and on every page
@require_safe
@cache_control(public=True, max_age=86_400)
def favicon(request: HttpRequest) -> FileResponse:
    """/favicon.ico, which browsers ask for where a page names no icon (the Django admin, a
    JSON answer): the console's icon (its pages link core/favicon.svg)."""
    found = finders.find("core/favicon.ico")
    if not isinstance(found, str):
        raise Http404("no favicon")
    return FileResponse(open(found, "rb"), content_type="image/x-icon")


urlpatterns = [
    path("favicon.ico", favicon),
    path("admin/", admin.site.urls),
    path("", include("core.urls")),
]

# The console's error pages: the reason in the layout, never a traceback.
handler400 = "core.console.errors.bad_request"
handler403 = "core.console.errors.permission_denied"
handler404 = "core.console.errors.not_found"
handler500 = "core.console.errors.server_error"
