"""Orbax checkpoints of the train state, the data iterator and the config, together.

Saves are asynchronous and atomic (Orbax writes to a temporary directory and
renames it on commit), so a checkpoint that exists is a complete one.

The data position is saved once, as JSON, not per process: every process is at
the same global batch (see data/pipeline.py), so a checkpoint written by N
processes resumes on M.
"""

import contextlib
import errno
import json
import logging
import os
import shutil
import sys
import traceback

import jax
import orbax.checkpoint as ocp

from pretrainx.errors import DiskFullError, UserError, WriterFailedError


def _abstract(state, shardings):
    return jax.tree_util.tree_map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, shardings)


# How a full disk reads where only its text survives (Orbax's logs, tensorstore's errors)
DISK_FULL_TEXTS = ("No space left on device", "RESOURCE_EXHAUSTED")


class _QuietWriterFailures(logging.Filter):
    """Orbax's background threads each log a failed write with a traceback (and asyncio
    logs the same errors again as "Task exception was never retrieved" when it
    collects Orbax's write tasks); the main thread raises the same error, which the
    Checkpointer reports once, as one line. Quieted: a full disk, and any Orbax error
    while a checkpoints folder of this process has gone bad (removed, replaced)."""

    def __init__(self):
        super().__init__()
        self.checkpointers = set()  # the open ones, whose folders are watched

    def filter(self, record):
        text = record.getMessage()
        if record.exc_info:
            text += "".join(traceback.format_exception(*record.exc_info))
        if "orbax" not in record.pathname and "orbax" not in text:
            return True
        if any(said in text for said in DISK_FULL_TEXTS):
            return False
        # stat calls only (no probe write), and only for what would be printed
        return record.levelno < logging.WARNING or not any(
            c._folder_problem(probe=False) for c in list(self.checkpointers))


_QUIET = _QuietWriterFailures()


def _for_a_dead_loop(kind, value, tb) -> bool:
    """Whether a report is asyncio refusing a callback because its loop is closed:
    tensorstore's writer threads finishing after a failed save (a full disk) hand their
    results to Orbax's event loop, closed by then, and each refusal is printed as a
    traceback of its own (140 of them on a 7 MB disk). The main thread reports the
    failure once; a result for a dead loop has no reader."""
    last = traceback.extract_tb(tb)[-1:] if tb is not None else []
    return bool(kind is RuntimeError and str(value) == "Event loop is closed" and last
                and last[0].filename.endswith(os.path.join("asyncio", "base_events.py")))


def _quiet_dead_loop_reports(previous_except, previous_unraisable):
    """sys.excepthook and sys.unraisablehook less the dead-loop reports. tensorstore
    prints a failed callback through either (PyErr_Print, or PyErr_WriteUnraisable
    with no object, which on Python 3.11 prints a bare traceback), so both are
    wrapped. Every other report goes to the hook that was there before."""
    def excepthook(kind, value, tb):
        if not _for_a_dead_loop(kind, value, tb):
            previous_except(kind, value, tb)

    def unraisablehook(report):
        if not _for_a_dead_loop(report.exc_type, report.exc_value, report.exc_traceback):
            previous_unraisable(report)
    excepthook.quiets_dead_loops = unraisablehook.quiets_dead_loops = True
    return excepthook, unraisablehook


def _install_quiet_hooks() -> None:
    if not getattr(sys.excepthook, "quiets_dead_loops", False):  # once a process
        sys.excepthook, sys.unraisablehook = _quiet_dead_loop_reports(
            sys.excepthook, sys.unraisablehook)


def _disk_full(e: BaseException) -> bool:
    """Whether a full disk is anywhere in `e`'s chain: an OSError with ENOSPC, or
    tensorstore's and Orbax's wrappers of one, which carry only its text (which of
    them reaches the main thread depends on which writer thread fails first)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return True
        if any(said in str(e) for said in DISK_FULL_TEXTS):
            return True
        e = e.__cause__ or e.__context__
    return False


# Old steps are moved here by Orbax (a rename, which moves a symbolic link and not what
# it points to) and removed by the Checkpointer without following links.
OLD_STEPS = ".old_steps"


def remove_old_steps(directory: str) -> None:
    """Empties `directory`/OLD_STEPS: a link is unlinked, never followed (an archived
    checkpoint moved to another disk and linked back stays whole where it lives); a
    failure is one warning line, never the end of the run."""
    trash = os.path.join(directory, OLD_STEPS)
    try:
        entries = sorted(os.scandir(trash), key=lambda e: e.name)
    except FileNotFoundError:
        return
    except OSError as e:
        print(f"warning: cannot list {trash}: {e.strerror or e}", file=sys.stderr, flush=True)
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)  # does not follow links inside it either
            else:
                os.unlink(entry.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            print(f"warning: cannot remove the old checkpoint {entry.path}: "
                  f"{e.strerror or e}", file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):  # left where a removal failed or a rename came in
        os.rmdir(trash)


def save_replicas_whole_in_one_process() -> None:
    """One process holds every replica of an array, so Orbax's replica-parallel saving
    (each replica writes a slice, so that hosts share the writing) gains nothing there,
    and it compiles a slicing program for each array and device: a save of 30 small
    arrays on a (2, 2, 2) CPU mesh made 240 compiles and took 8.6 s, against 0.05 s
    without. Several processes keep Orbax's default; the files restore either way."""
    if jax.process_count() > 1:
        return
    try:  # where Orbax keeps the store its default handler gets (not exported)
        from orbax.checkpoint._src.metadata import array_metadata_store
    except ImportError:  # moved in another Orbax: keep its default handler
        return
    from absl import logging as absl_logging
    before = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)  # the override is meant: no warning line
    try:
        ocp.type_handlers.register_type_handler(
            jax.Array, ocp.type_handlers.ArrayHandler(
                array_metadata_store=array_metadata_store.Store(), use_replica_parallel=False),
            override=True)
    finally:
        absl_logging.set_verbosity(before)


def check_writable(directory: str) -> None:
    """A checkpoint folder that is a file, or that cannot be written, refused at the
    start in one line (Orbax finds out at the first save, minutes into an Orbax retry
    loop, with all the training before it lost)."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UserError(f"{directory} is a file, not a folder: checkpoints cannot be "
                        "written there; move it away")
    probe = os.path.join(directory, f".write_probe_{os.getpid()}")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(probe, "w", encoding="utf-8") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        raise UserError(f"cannot write checkpoints in {directory}: "
                        f"{e.strerror or e}") from None


class Checkpointer:
    def __init__(self, workdir: str, keep: int, save_every: int):
        for name in ("absl", "asyncio"):
            logging.getLogger(name).addFilter(_QUIET)  # once: filters are a set
        _install_quiet_hooks()
        save_replicas_whole_in_one_process()
        local = "://" not in workdir
        root = os.path.abspath(workdir) if local else workdir
        self.directory = f"{root.rstrip('/')}/checkpoints"
        # Orbax's own deletion follows a step folder that is a link: its parallel
        # deleter (hosts of 4+ cores) empties the target, its rmtree refuses the link.
        # Locally, old steps are renamed into OLD_STEPS and removed here instead.
        self._local = local
        # The folder held open: a folder of that name that is not this one (Orbax's
        # writers make it again after an `rm -rf`) is told apart, as holding it keeps
        # its inode number from being reused
        self._held = None
        if local and jax.process_index() == 0:
            check_writable(self.directory)
            self._held = os.open(self.directory, os.O_RDONLY)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, save_interval_steps=1, create=True,
            enable_async_checkpointing=True, todelete_subdir=OLD_STEPS if local else None)
        try:
            self.manager = ocp.CheckpointManager(
                self.directory, options=options, item_names=("state", "data", "config"))
        except OSError as e:
            raise UserError(f"cannot create checkpoint directory {self.directory}: "
                            f"{e.strerror or e}") from None
        self.save_every = save_every
        self._remove_old_steps()
        _QUIET.checkpointers.add(self)

    def _remove_old_steps(self):
        if self._local and jax.process_index() == 0:
            remove_old_steps(self.directory)

    def latest_step(self):
        return self.manager.latest_step()

    @contextlib.contextmanager
    def _failures_are_one_line(self):
        """A full disk, or a checkpoints folder removed, replaced or made unwritable
        while the run writes it, stops the run in one line naming what is left (Orbax
        writes into a temporary directory and deletes old steps after a commit, so a
        committed checkpoint is never the one that failed)."""
        try:
            yield
        except Exception as e:  # async saves raise on the next save or wait
            if _disk_full(e):
                raise DiskFullError(f"no space left on the device writing a checkpoint in "
                                    f"{self.directory}; committed checkpoints kept: "
                                    f"{self._committed() or 'none'}") from None
            problem = self._folder_problem()
            if problem is None:
                raise
            raise WriterFailedError(
                f"the checkpoints folder {self.directory} {problem} while the run wrote to "
                f"it; committed checkpoints left: {self._committed() or 'none'}; the run "
                "stops (run the same command to resume from them)") from None

    def _folder_problem(self, probe: bool = True) -> str | None:
        """What is wrong with a local checkpoints folder, or None; `probe`: also write
        and remove a file to find one that cannot be written."""
        if self._held is None:
            return None
        if not os.path.lexists(self.directory):
            return "was removed"
        if not os.path.isdir(self.directory):
            return "was replaced by a file"
        if os.stat(self.directory).st_ino != os.fstat(self._held).st_ino:
            return "was removed (or moved away)"
        if not probe:
            return None
        try:
            check_writable(self.directory)
        except UserError as e:
            return f"cannot be written ({str(e).rsplit(': ', 1)[-1]})"
        return None

    def _committed(self) -> list:
        try:
            return sorted(int(n) for n in os.listdir(self.directory) if n.isdigit())
        except OSError:
            return []

    def save(self, step: int, state, data_iterator, config_json: str, force: bool = False,
             layout: dict | None = None, phase: str = "") -> bool:
        """`layout` (processes, slices, mesh: sharding.layout) goes beside the data
        position, so that a resume on another layout can say what changed; so does
        `phase`, the phase whose data position it is (a named phase's name)."""
        data = dict(data_iterator.get_state(), **({"layout": layout} if layout else {}),
                    **({"phase": phase} if phase else {}))
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave(data),
            config=ocp.args.JsonSave(json.loads(config_json)))
        with self._failures_are_one_line():
            saved = self.manager.save(step, args=args, force=force)
        self._remove_old_steps()  # the previous save's, committed before this one began
        return saved

    def restore(self, abstract_state, shardings, data_iterator_for_step, check_config):
        """Newest checkpoint that restores; a broken one is reported and skipped.

        `check_config(saved_config)` runs before the state is read and raises to
        refuse a checkpoint of another model. `data_iterator_for_step(step)` builds
        the (fresh) iterator of the phase that step belongs to, whose position the
        checkpoint then sets. Returns (step, state, data_iterator, saved_config,
        saved_layout: None for checkpoints written before layouts were saved), or
        None when there is no checkpoint; when there are some and none restores,
        refuses to start afresh over them.
        """
        steps = sorted(self.manager.all_steps(), reverse=True)
        for step in steps:
            try:
                saved_config = self.manager.restore(step, args=ocp.args.Composite(
                    config=ocp.args.JsonRestore()))["config"]
            except Exception as e:
                self._warn(step, e)
                continue
            check_config(saved_config)
            iterator = data_iterator_for_step(step)
            try:
                restored = self.manager.restore(step, args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(_abstract(abstract_state, shardings)),
                    data=ocp.args.JsonRestore()))
                if iterator is not None:  # None: the state alone (an evaluation)
                    iterator.set_state(restored["data"])
            except UserError:  # it restores, but into other data: say so, do not skip it
                raise
            except Exception as e:  # a truncated or half-deleted checkpoint
                self._warn(step, e)
                continue
            return step, restored["state"], iterator, saved_config, restored["data"].get("layout")
        if steps:
            raise UserError(f"no checkpoint in {self.directory} restores (tried {steps}); "
                            "move them away to start afresh")
        return None

    def _warn(self, step, e):
        print(f"warning: checkpoint {self.directory}/{step} does not restore "
              f"({type(e).__name__}: {str(e).splitlines()[0][:200]}); trying an older one",
              file=sys.stderr, flush=True)

    def reached_preemption(self, step: int) -> bool:
        """True at the step all hosts agreed to save after a preemption notice
        (JAX's preemption service; always False in a single process)."""
        return self.manager.reached_preemption(step)

    def wait(self):
        """Until the saves under way are committed (a reader may then open them)."""
        with self._failures_are_one_line():
            self.manager.wait_until_finished()
        self._remove_old_steps()

    def close(self):
        try:
            with self._failures_are_one_line():  # closing can finish a write too
                self.manager.wait_until_finished()
                self.manager.close()
        finally:
            self.let_go()
        self._remove_old_steps()

    def let_go(self):
        """Stop watching the folder (a run refused after this was made saved nothing)."""
        _QUIET.checkpointers.discard(self)
        if self._held is not None:
            os.close(self._held)
            self._held = None
