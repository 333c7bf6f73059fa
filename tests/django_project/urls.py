from django.urls import path

from tests.django_project.shop import views

urlpatterns = [
    path("orders/", views.place_order),
    path("orders/<int:order_id>/", views.order),
    path("results/<str:alias>/<str:result_id>/", views.result),
]
