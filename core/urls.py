from django.contrib.auth import views as auth_views
from django.urls import path

from core.views import (
    actions,
    audit,
    bulk,
    datajobs,
    dead,
    overview,
    pending,
    requests,
    scheduled,
    schedules,
    search,
    service,
    workers,
)

app_name = "core"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("requests/", requests.request_list, name="requests"),
    path("scheduled/", scheduled.scheduled_list, name="scheduled"),
    path("search/", search.search, name="search"),
    path("requests/<str:queue_name>/<str:request_id>/", requests.request_detail, name="request"),
    path("schedules/", schedules.schedule_list, name="schedules"),
    path("schedules/preview/", schedules.schedule_preview, name="schedule_preview"),
    path("schedules/save/", schedules.schedule_save, name="schedule_save"),
    path("schedules/<str:queue_name>/<str:name>/edit/", schedules.schedule_edit,
         name="schedule_edit"),
    path("schedules/<str:queue_name>/<str:name>/<slug:action>/", schedules.schedule_act,
         name="schedule_act"),
    path("pending/", pending.pending_list, name="pending"),
    path("dead/", dead.groups, name="dead"),
    path("dead/<str:queue_name>/<str:fingerprint>/", dead.group, name="dead_group"),
    path("workers/", workers.worker_list, name="workers"),
    path("audit/", audit.audit_log, name="audit"),
    path("jobs/", datajobs.job_list, name="datajobs"),
    path("jobs/submit/", datajobs.job_submit, name="datajob_submit"),
    path("jobs/<str:queue_name>/<str:job_id>/", datajobs.job_detail, name="datajob"),
    path("actions/preview/", bulk.preview, name="bulk_preview"),
    path("actions/bulk/<int:bulk_id>/", bulk.show, name="bulk"),
    path("actions/bulk/<int:bulk_id>/confirm/", bulk.confirm, name="bulk_confirm"),
    path("actions/bulk/<int:bulk_id>/stop/", bulk.stop, name="bulk_stop"),
    path("actions/<slug:name>/", actions.act, name="act"),
    path("healthz", service.healthz, name="healthz"),
    path("metrics", service.metrics, name="metrics"),
    path("login/", auth_views.LoginView.as_view(template_name="core/login.html",
                                                redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
