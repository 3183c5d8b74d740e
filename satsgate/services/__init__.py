"""Services: the catalog, ServiceSpec registry, handlers by family, and engines."""
