"""What every wire API shares: reading.py (a body into its model, bounded), errors.py (the
one error), replies.py (a stream sent or folded, its lease returned on every path), guard.py
(allowed origins and hosts), access_log.py (a line per request)."""
