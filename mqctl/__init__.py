"""mqctl: a RocketMQ-style message queue in a directory, driven from the shell."""
__version__ = "0.1.0"
