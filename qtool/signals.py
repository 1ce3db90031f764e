"""The signals qtool turns into one line and exit code 128 + N: shared by the entry point, which
handles them from its first instant, and the command line's guard, which takes over while a
command runs."""

HANDLED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
