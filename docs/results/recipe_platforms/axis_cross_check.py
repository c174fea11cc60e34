"""Item 42 of README.md: would a check across flights tell, on the calibration flights alone, whether the per-axis
variance factors carry over to the flights one will fly?

Item 41 found the factors fitted on ``nano``'s nine calibration flights costing its test flights fused AVE, and
those of NanoBench's nine helping its val flights. This splits the calibration flights into K folds (``calibrate``'s
rule: near-equal total duration, longest flight first), fits the three factors on the other folds by ``calibrate``'s
objective (the fused velocity's posterior NLL per update, replayed offline from the estimates ``velobins evaluate``
saved with the factors at 1), and scores each held-out fold at its fold's factors and at 1. A sum over the held-out
folds that is lower at the fold factors says the factors carry from flights to flights like these; then the test
flights (an outside check, never used to decide) are scored at 1 and at the factors fitted on every calibration
flight. Usage:

    python axis_cross_check.py FILTER.yaml... -- CAL_FLIGHTS CAL_EVAL TEST_FLIGHTS TEST_EVAL [--folds K]
        [--dataset csv|nanobench] [--shrink] [--repeats R]

``--shrink`` (item 43) also scores the held-out folds at the folds' factors shrunk toward 1, k^a for a in
:data:`SHRINK`, picks the a with the lowest held-out NLL, and scores the test flights at every a (the factors fitted
on all calibration flights, shrunk): between "keep" (a = 1) and "set back" (a = 0), chosen the same way.

``--repeats R`` (item 44) runs the check on R splits of the calibration flights into K folds: ``calibrate``'s
split, then R − 1 others drawn at random (seed :data:`SEED`) among those with the same fold sizes whose fold durations
differ by no more than :data:`BALANCE` of a fold's mean (or the first split's spread, if larger). It prints each
split's verdict, the verdict of the held-out objective summed over all splits (repeated K-fold cross-validation),
and each flight's gain averaged over the splits: does averaging over splits decide where one split's verdict turns
with the folds? Every split's line also gives the held-out fused AVE (pooled over the held-out updates) at 1
and at the folds' factors, a score the factors' fit does not use.

FILTER.yaml are the parameter files of the evaluations (the IMU overlay, then the run's overlay).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from axis_scale_probe import ESTIMATE_COLUMNS, VAR_COLUMNS, _fail, flights_in, saved_updates
from scipy.optimize import minimize

from velobins_common.stats import gaussian_nll_samples, nees
from velobins_data.flight import Flight
from velobins_ekf.offline import run_offline
from velobins_eval.calibrate_folds import fold_indices
from velobins_eval.evaluate import ground_truth_state, load_ekf_config
from velobins_eval.metrics import nees_summary
from velobins_eval.scoring import GroundTruth

STEP = 0.3
"""First simplex step [decades] of the Nelder–Mead search in log10 factors (a factor 2)."""
SHRINK = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Powers a of the factors ``--shrink`` scores (k^a: 0 is factors 1, 1 the fit)."""
SEED = 44
"""Seed of the splits ``--repeats`` draws after ``calibrate``'s own."""
BALANCE = 0.1
"""Spread of fold durations (max − min, as a share of a fold's mean) a drawn split may have."""
LIMIT = 2.0
"""|log10 factor| the search keeps within (``calibrate``'s own limits are wider; none of the fits here reach it)."""


class Replays:
    """Each flight's fused velocity per update at a set of log10 factors, cached (a flight's filter does not
    depend on the other flights', so a fold's objective is a sum of these)."""

    def __init__(self, flights: dict[str, Flight], saved: dict[str, pd.DataFrame], config) -> None:
        self.flights, self.saved, self.config = flights, saved, config
        self.cache: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def errors(self, name: str, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fused errors (M, 3), covariances (M, 3, 3), fused AVE terms (M,)) of flight ``name`` at 10^z."""
        key = (name, *np.round(z, 6))
        if key not in self.cache:
            seq, u = self.flights[name], self.saved[name]
            var = u[VAR_COLUMNS].to_numpy() * 10.0 ** np.asarray(z)
            res = run_offline(
                seq.t, seq.acc, seq.gyro, u.t.to_numpy(), u[ESTIMATE_COLUMNS].to_numpy(),
                np.einsum("ni,ij->nij", var, np.eye(3)), init_state=ground_truth_state(seq), config=self.config,
            )  # fmt: skip
            ups = [x for x in res.updates if x.accepted]
            stamps = np.array([x.stamp for x in ups])
            err = np.array([x.vel_world for x in ups]) - GroundTruth.of(seq).at(stamps).v
            cov = np.array([x.vel_world_cov for x in ups])
            self.cache[key] = (err, cov, np.linalg.norm(err, axis=1))
        return self.cache[key]

    def nll(self, names: list[str], z: np.ndarray) -> tuple[float, int]:
        """(summed posterior NLL, updates) over ``names`` at 10^z."""
        terms = [self.errors(n, z) for n in names]
        return float(sum(gaussian_nll_samples(e, c).sum() for e, c, _ in terms)), sum(len(e) for e, _, _ in terms)

    def figures(self, names: list[str], z: np.ndarray) -> tuple[float, float, float]:
        """(fused AVE, posterior NLL, NEES share in bounds) at 10^z, means over the flights ``names`` as
        ``velobins evaluate`` gives them."""
        per_flight = []
        for name in names:
            err, cov, norms = self.errors(name, z)
            inside = nees_summary(nees(err, cov)).in_bounds
            per_flight.append((norms.mean(), gaussian_nll_samples(err, cov).mean(), inside))
        return tuple(float(x) for x in np.mean(per_flight, axis=0))

    def fit(self, names: list[str]) -> np.ndarray:
        """log10 factors minimising the NLL per update over ``names`` (Nelder–Mead from 0, within ±LIMIT)."""

        def objective(z: np.ndarray) -> float:
            if np.any(np.abs(z) > LIMIT):
                return np.inf
            total, n = self.nll(names, z)
            return total / n

        simplex = np.vstack([np.zeros(3), STEP * np.eye(3)])
        res = minimize(objective, np.zeros(3), method="Nelder-Mead",
                       options={"initial_simplex": simplex, "xatol": 0.01, "fatol": 1e-5, "maxfev": 150})  # fmt: skip
        return res.x


def other_splits(flights: list[Flight], first: list[list[int]], count: int) -> list[list[list[int]]]:
    """``count`` splits of ``flights`` (or as many as 20000 draws find) unlike ``first`` and each other, with the fold
    sizes of ``first`` and fold durations within :data:`BALANCE` of a fold's mean (or ``first``'s spread)."""
    sizes = [len(f) for f in first]
    durations = np.array([f.duration for f in flights])

    def spread(split: list[list[int]]) -> float:
        load = [durations[f].sum() for f in split]
        return (max(load) - min(load)) / np.mean(load)

    tolerance = max(BALANCE, spread(first))
    seen = {frozenset(frozenset(f) for f in first)}
    rng = np.random.default_rng(SEED)
    out: list[list[list[int]]] = []
    for _ in range(20000):
        if len(out) == count:
            break
        order = rng.permutation(len(flights))
        split = [sorted(int(i) for i in order[sum(sizes[:j]) : sum(sizes[: j + 1])]) for j in range(len(sizes))]
        key = frozenset(frozenset(f) for f in split)
        if key not in seen and spread(split) <= tolerance:
            seen.add(key)
            out.append(split)
    return out


def factors(z: np.ndarray) -> str:
    return "(" + ", ".join(f"{10.0**v:.3g}" for v in z) + ")"


def main(args: list[str]) -> int:
    k = 3
    kind = "csv"
    repeats = 1
    shrink = "--shrink" in args
    args = [a for a in args if a != "--shrink"]
    for flag in ("--folds", "--dataset", "--repeats"):
        if flag in args:
            i = args.index(flag)
            if flag == "--folds":
                k = int(args[i + 1])
            elif flag == "--repeats":
                repeats = int(args[i + 1])
            else:
                kind = args[i + 1]
            args = args[:i] + args[i + 2 :]
    if "--" not in args or len(args) - args.index("--") != 5:
        sys.exit(__doc__)
    split = args.index("--")
    config = load_ekf_config([Path(p) for p in args[:split]])
    cal_dir, cal_eval, test_dir, test_eval = (Path(p) for p in args[split + 1 :])
    cal, test = flights_in(cal_dir, kind), flights_in(test_dir, kind)
    if len(cal) < k:
        return _fail(f"{cal_dir}: {len(cal)} flights for {k} folds")
    replays = Replays(cal, saved_updates(cal_eval, cal), config)
    unit = np.zeros(3)
    names = list(cal)
    first = fold_indices(list(cal.values()), k)  # calibrate's own folds
    splits = [first, *other_splits(list(cal.values()), first, repeats - 1)]
    held_at = dict.fromkeys(SHRINK, 0.0)
    flight_gain = dict.fromkeys(names, 0.0)  # summed over splits: NLL at 1 minus at the fold's factors, per update
    totals = np.zeros(5)  # over splits: held-out NLL at 1, at the folds' factors, fused AVE terms at both, updates
    carried = 0
    for r, folds in enumerate(splits):
        in_split = np.zeros(5)  # as totals, this split's
        gaining = 0
        for i, held in enumerate(folds):
            fold = [names[j] for j in held]
            rest = [n for n in cal if n not in fold]
            z = replays.fit(rest)
            terms = np.zeros(5)  # as totals, this fold's, summed over its flights
            for name in fold:
                (at_unit, m), (at_fit, _) = replays.nll([name], unit), replays.nll([name], z)
                flight_gain[name] += (at_unit - at_fit) / m
                aves = (replays.errors(name, unit)[2].sum(), replays.errors(name, z)[2].sum())
                terms += (at_unit, at_fit, *aves, m)
            in_split += terms
            gaining += terms[1] < terms[0]
            if shrink and r == 0:
                for a in SHRINK:
                    held_at[a] += replays.nll(fold, a * z)[0]
            print(
                f"{'' if r == 0 else f'split {r} '}fold {i} ({', '.join(fold)}): factors {factors(z)} from the other"
                f" {len(rest)} flights; held-out NLL {terms[0] / terms[4]:.4f} at 1 -> {terms[1] / terms[4]:.4f}",
                flush=True,
            )
        carried += in_split[1] < in_split[0]
        totals += in_split
        verdict = "carry over" if in_split[1] < in_split[0] else "do not carry over"
        nll_unit, nll_fit, ave_unit, ave_fit = in_split[:4] / in_split[4]
        print(
            f"{'' if r == 0 else f'split {r}: '}held out, {int(in_split[4])} updates: NLL {nll_unit:.4f} at 1 ->"
            f" {nll_fit:.4f} ({gaining} of {len(folds)} folds gain): the factors {verdict}; fused AVE"
            f" {ave_unit:.4f} at 1 -> {ave_fit:.4f}",
            flush=True,
        )
    updates = totals[4] / len(splits)  # every split holds out every flight once
    if repeats > 1:
        verdict = "carry over" if totals[1] < totals[0] else "do not carry over"
        nll_unit, nll_fit, ave_unit, ave_fit = totals[:4] / totals[4]
        print(
            f"over {len(splits)} splits, {int(totals[4])} held-out updates: NLL {nll_unit:.4f} at 1 ->"
            f" {nll_fit:.4f} ({carried} of {len(splits)} splits carry): the factors {verdict}; fused AVE"
            f" {ave_unit:.4f} at 1 -> {ave_fit:.4f}"
        )
        ranked = sorted(names, key=lambda n: -flight_gain[n])
        gains = ", ".join(f"{n} {flight_gain[n] / len(splits):+.3f}" for n in ranked)
        gained = sum(flight_gain[n] > 0 for n in names)
        print(f"each flight's held-out gain [nats/update], mean over the splits ({gained} of {len(names)}): {gains}")
    z_all = replays.fit(list(cal))
    print(f"every calibration flight: factors {factors(z_all)}, NLL {replays.figures(list(cal), z_all)[1]:.4f}")
    outside = Replays(test, saved_updates(test_eval, test), config)
    for label, z in (("1", unit), (factors(z_all), z_all)):
        ave, nll, inside = outside.figures(list(test), z)
        print(f"test flights at {label}: fused AVE {ave:.4f}, NLL {nll:.4f}, in bounds {inside:.1%}")
    if shrink:
        best = min(SHRINK, key=lambda a: held_at[a])
        print("shrunk toward 1, k^a (held out: the folds' factors; test flights: every flight's):")
        for a in SHRINK:
            ave, nll, inside = outside.figures(list(test), a * z_all)
            mark = "  <- held out's pick" if a == best else ""
            print(
                f"  a {a:.2f}: held-out NLL {held_at[a] / updates:.4f}; test flights at {factors(a * z_all)}:"
                f" fused AVE {ave:.4f}, NLL {nll:.4f}, in bounds {inside:.1%}{mark}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
