"""django-push-notifications' device API for APNs, as its DRF router publishes it."""

from django.urls import include, path
from push_notifications.api.rest_framework import APNSDeviceViewSet
from rest_framework.routers import DefaultRouter

router = DefaultRouter()
router.register("device/apns", APNSDeviceViewSet)
urlpatterns = [path("", include(router.urls))]
