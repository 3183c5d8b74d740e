"""satsgate.web: the hosted checkout page; its template and static files live in this package."""

from satsgate.web.checkout import CHECKOUT_PATH, STATUS_PATH, install

__all__ = ["CHECKOUT_PATH", "STATUS_PATH", "install"]
