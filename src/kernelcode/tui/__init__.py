"""kernel-code: the Textual app that runs a kernel search live.

``create_app`` builds the app for the CLI, the tests and the benchmark alike.
"""

from kernelcode.tui.app import KernelCodeApp, create_app

__all__ = ["KernelCodeApp", "create_app"]
