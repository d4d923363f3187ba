from .registry import register_backend, lookup_backend, list_backends
