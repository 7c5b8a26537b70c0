"""How a pull fails: one sentence for the user, with the HTTP status a server answers it with
(400: the name, the request, or what the registry serves for it is not a model this runner
takes; 404: no such model; 499: its clients left; 502: the registry; 507: the disk)."""

from __future__ import annotations


class PullError(RuntimeError):
    """A pull that failed; a broken transfer raising it is retried from where it stopped."""

    def __init__(self, message: str, status: int = 502):
        super().__init__(message)
        self.status = status


class Refused(PullError):
    """What the registry serves for the name is not what a model is (a malformed manifest,
    a size that is not one, a blob of another size than its manifest says): not retried,
    and nothing of it is kept."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message, status)


class Cancelled(PullError):
    """The pull was stopped because every client that asked for it left: not retried; what
    arrived is kept for the next pull to resume."""

    def __init__(self, message: str):
        super().__init__(message, 499)
