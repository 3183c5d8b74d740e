"""satsgate.web: the hosted checkout page (its template and static files live in this
package) and the node's own free routes (api.py: health, catalogs, files, LNURL-withdraw)."""

from satsgate.web.checkout import CHECKOUT_PATH, install

__all__ = ["CHECKOUT_PATH", "install"]
