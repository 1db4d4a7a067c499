"""Who may connect and call: the port front (TLS, connection and request limits),
signatures, users and ACL, the names a request is checked under, log rate limits.
"""
