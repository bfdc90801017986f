"""``mqctl consume``'s sinks (stdout, ``--exec``) for the library's consumer runtime, ``store.client.runtime``."""
