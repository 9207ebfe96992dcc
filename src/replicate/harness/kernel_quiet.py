"""Kernel config file (`--config=` on the kernel's command line, see `cli.run_chapter`).

The kernel logs "Kernel is running over TCP without encryption" at every start; the kernel and
papermill talk over the loopback interface of one machine, so that one warning is noise on every
run. This file is executed by the kernel while it reads its configuration, before it opens its
sockets, and filters that one message from the kernel's log; every other message still shows.
"""
import logging


class _NoTcpWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "running over TCP without encryption" not in str(record.msg)


logging.getLogger("IPKernelApp").addFilter(_NoTcpWarning())
