"""Kernel config file (`--config=` on the kernel's command line, see `execute.execute`): it filters
the one message the kernel logs at every start, "Kernel is running over TCP without encryption"
(papermill and the kernel talk over this machine's loopback), and lets every other one through."""
import logging


class _NoTcpWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "running over TCP without encryption" not in str(record.msg)


logging.getLogger("IPKernelApp").addFilter(_NoTcpWarning())
