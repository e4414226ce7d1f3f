"""Transports only frame messages; the dispatcher does the protocol."""
