"""Named training variants: every row of the supervision ablation (§V, Table II).

Grammar: ``reg`` or ``<supervision>^<source>`` with supervision ∈ {H, M, G, G+H, M+H} and
uncertainty source ∈ {B, C, B+C}; a missing source means ``B`` (the bin variance).

* ``reg``: AI-IO regression baseline (Reg (H+N)^C): Huber, then Gaussian NLL with the log-σ head.
* ``H``: Huber on the decoded velocity only; uncertainty from the bins (``B``).
* ``M``: RTMO-style mixture likelihood (needs the covariance decoder); ``B``, ``C`` or ``B+C``.
* ``G``: KL to error-conditioned Gaussian labels; ``B`` only (no covariance decoder is trained).
* ``G+H``: G plus Huber (VeloBins); ``B`` only.
* ``M+H``: M plus Huber; ``B``, ``C`` or ``B+C``.

The baselines of Table I are variants too, named by their method (``tlio``, ``eqnio``, ``imo``,
``airio``): their own network (:mod:`velobins_net.baselines`), loss schedule and covariance head
(source ``C``). ``ai-io`` is another name of ``reg``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import BASELINE_METHODS

SUPERVISIONS: dict[str, tuple[str, ...]] = {
    "H": ("B",),
    "M": ("B", "C", "B+C"),
    "G": ("B",),
    "G+H": ("B",),
    "M+H": ("B", "C", "B+C"),
}
"""Bin supervisions and the uncertainty sources that are meaningful for each."""

REGRESSION = "reg"


METHOD_ALIASES = {"ai-io": REGRESSION, "aiio": REGRESSION, "velobins": "G+H^B"}
"""``velobins train --method`` names that are variants of the VeloBins network."""


@dataclass(frozen=True)
class Variant:
    """A parsed variant.

    Attributes:
        name: canonical string, e.g. ``"G+H^B"`` or ``"reg"``.
        supervision: ``"reg"``, ``"H"``, ``"M"``, ``"G"``, ``"G+H"`` or ``"M+H"``.
        uncertainty: ``"B"``, ``"C"`` or ``"B+C"`` (``"C"`` for ``reg``).
    """

    name: str
    supervision: str
    uncertainty: str

    @property
    def method(self) -> str:
        """Network family (``velobins_net.config.METHODS``): the baseline's name, else ``velobins``."""
        return self.supervision if self.supervision in BASELINE_METHODS else "velobins"

    @property
    def is_baseline(self) -> bool:
        """True for TLIO, EqNIO, IMO and AirIO (their own network and loss)."""
        return self.supervision in BASELINE_METHODS

    @property
    def is_regression(self) -> bool:
        """True for the AI-IO regression baseline."""
        return self.supervision == REGRESSION

    @property
    def uses_huber(self) -> bool:
        """Huber term on the decoded velocity (eq:huber)."""
        return self.supervision in ("H", "G+H", "M+H")

    @property
    def uses_kl(self) -> bool:
        """KL to error-conditioned labels (eq:kl)."""
        return self.supervision in ("G", "G+H")

    @property
    def uses_mixture(self) -> bool:
        """RTMO-style mixture likelihood (needs the covariance decoder)."""
        return self.supervision in ("M", "M+H")

    @property
    def needs_cov_head(self) -> bool:
        """Whether the model carries a covariance decoder."""
        return self.is_regression or self.uses_mixture


def parse_variant(text: str) -> Variant:
    """Parse ``"reg"``, ``"G+H^B"``, ``"M+H^B+C"``, ``"G"`` … into a :class:`Variant`; ValueError if invalid."""
    s = text.strip().replace(" ", "")
    s = METHOD_ALIASES.get(s.lower(), s)
    if s.lower() in (REGRESSION, "reg^c"):
        return Variant(REGRESSION, REGRESSION, "C")
    if s.lower() in BASELINE_METHODS:
        return Variant(s.lower(), s.lower(), "C")
    sup, _, source = s.partition("^")
    source = source or "B"
    if sup not in SUPERVISIONS:
        raise ValueError(
            f"variant {text!r}: unknown supervision {sup!r}; choose reg, one of {sorted(SUPERVISIONS)}"
            f" or a baseline {BASELINE_METHODS}"
        )
    if source not in SUPERVISIONS[sup]:
        raise ValueError(
            f"variant {text!r}: uncertainty source {source!r} is not meaningful for {sup} "
            f"(allowed: {', '.join(SUPERVISIONS[sup])})"
        )
    return Variant(f"{sup}^{source}", sup, source)


def all_variants() -> list[Variant]:
    """Every valid variant (the rows of Table II)."""
    out = [parse_variant(REGRESSION)]
    out += [parse_variant(f"{sup}^{src}") for sup, srcs in SUPERVISIONS.items() for src in srcs]
    return out
