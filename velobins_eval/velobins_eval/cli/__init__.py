"""The ``velobins`` command line: one module per command, shared options defined once.

As in rosbags' ``convert`` package, parsing, orchestration and work are apart:

* :mod:`.dispatch` — the entry point (:func:`main`), the subcommand table and the one place that turns
  a user's mistake into one line and exit status 2;
* :mod:`.options` — the options every command shares (``--dataset``, ``--data``, ``--out``,
  ``--overwrite``, ``--allow``, ``--params``, ``--threads``);
* one module per command (:mod:`.check`, :mod:`.simulate`, :mod:`.convert`, :mod:`.train`,
  :mod:`.evaluate`, :mod:`.calibrate`, :mod:`.export`, :mod:`.demo`, :mod:`.reproduce`): its parser,
  its checks and the calls into the modules that do the work (:mod:`velobins_data`, :mod:`velobins_net`,
  :mod:`velobins_eval.evaluate`, ...).

Heavy imports (torch, rotorpy) happen inside the commands so ``velobins --help`` stays fast.
"""

from __future__ import annotations

from .dispatch import main, user_error_message

__all__ = ["main", "user_error_message"]
