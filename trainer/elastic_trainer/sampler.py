"""One look at the trainer's process per call: find it, read its state and CPU time
(trainer_process.py) and its main thread's stack (stacks.py). Whatever cannot be read
is left out of the sample and said once in the log, with what to do about it; nothing
here raises.
"""
from __future__ import annotations

import logging
from datetime import datetime

from elastic_trainer.activity import Sample
from elastic_trainer.stacks import StackReader, StackUnavailable
from elastic_trainer.trainer_process import (
    PROC,
    command_line,
    find_trainer,
    in_a_pods_namespace,
    read_stat,
)

log = logging.getLogger("etj.progress")

# py-spy's "lasting" errors in a row, on a process never read, before the sidecar stops
# trying: its "no interpreter found" also comes and goes while a busy process remaps its
# memory (seen on MaxText under load), and giving up on it blinds the sidecar for good.
LASTING_AFTER = 3


class ProcessSampler:
    """`pid`: the trainer's, if known; else it is looked for at every sample until found
    (and again once it is gone). `stacks` None: state and CPU time only."""

    def __init__(self, stacks: StackReader | None, pid: int | None = None,
                 proc: str = PROC, me: int | None = None) -> None:
        self.stacks, self.fixed_pid, self.proc, self.me = stacks, pid, proc, me
        self.pid: int | None = pid
        self.samples = self.stack_failures = 0
        self._said: set[str] = set()
        self._no_stacks: int | None = None  # the pid whose stacks cannot be read at all
        self._read_from: int | None = None  # the pid a stack was read from
        self._lasting_in_a_row = 0

    def _once(self, reason: str, message: str, *args: object) -> None:
        if reason not in self._said:
            self._said.add(reason)
            log.warning(message, *args)

    def _locate(self) -> int | None:
        if self.pid is not None and read_stat(self.pid, self.proc) is not None:
            return self.pid
        found = self.fixed_pid if self.fixed_pid is not None else find_trainer(self.proc, self.me)
        if found is None:
            if self.fixed_pid is None and not in_a_pods_namespace(self.proc, self.me):
                self._once("namespace", "not sampling the trainer: this sidecar is in the "
                           "machine's own process namespace, not a pod's (give --trainer-pid)")
            else:
                self._once("absent", "no trainer process in sight yet: none but this "
                           "sidecar's (does the pod share its process namespace?)")
        elif found != self.pid:
            log.info("sampling the trainer: pid %d (%s)", found,
                     " ".join(command_line(found, self.proc))[:200])
        self.pid = found
        return found

    def sample(self, at: datetime) -> Sample:
        self.samples += 1
        pid = self._locate()
        stat = read_stat(pid, self.proc) if pid is not None else None
        if pid is None or stat is None:
            return Sample(at)
        stack = None
        if self.stacks is not None and self._no_stacks != pid:
            try:
                stack = self.stacks.dump(pid)
                if stack is not None:
                    self._read_from, self._lasting_in_a_row = pid, 0
            except StackUnavailable as err:
                self.stack_failures += 1
                # a process once read is readable: its "lasting" error was a torn read
                lasting = err.lasting and self._read_from != pid
                self._lasting_in_a_row = self._lasting_in_a_row + 1 if lasting else 0
                if self._lasting_in_a_row >= LASTING_AFTER:
                    self._no_stacks = pid
                    self._once(f"stack: {str(err)[:40]}", "cannot read the trainer's stacks "
                               "(pid %d): %s; going on with its state, CPU time and metrics "
                               "file", pid, err)
                else:  # a stack torn while the trainer ran: the next sample reads one
                    self._once("torn", "a sample without the trainer's stack (pid %d): %s "
                               "(said once; counted)", pid, err)
        return Sample(at, state=stat.state, cpu_seconds=stat.cpu_seconds, stack=stack)
