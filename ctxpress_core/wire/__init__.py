"""NATS wire formats, one module per protocol version."""
