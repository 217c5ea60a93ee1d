"""Built-in fixes, each a pluggy plugin module with a ledger: Why / How / Upstream / Remove when."""
