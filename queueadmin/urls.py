from django.contrib import admin
from django.urls import include, path

admin.autodiscover()  # here, not at start-up: see INSTALLED_APPS

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("core.urls")),
]

# The console's error pages: the reason in the layout, never a traceback.
handler400 = "core.console.errors.bad_request"
handler403 = "core.console.errors.permission_denied"
handler404 = "core.console.errors.not_found"
handler500 = "core.console.errors.server_error"
