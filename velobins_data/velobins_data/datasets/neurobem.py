"""NeuroBEM adapter (processed CSV, 400 Hz, quadrotor with motor speeds in rad/s).

Reference: the published column list of the NeuroBEM processed data (Bauersfeld et al.,
"NeuroBEM", RSS 2021; rpg.ifi.uzh.ch/neuro_bem): ``t, ang acc x..z, ang vel x..z, quat x..w,
acc x..z, vel x..z, pos x..z, mot 1..4, dmot 1..4, vbat`` (and command columns in some exports).
No real file was available here: the adapter is tested on fixtures written in that schema;
what is *unverified* is marked below.

======================  ==========  =========================================================
columns used            unit        conversion
======================  ==========  =========================================================
``t``                   s           kept
``ang vel x/y/z``       rad/s       body rate (FLU), kept
``quat x/y/z/w``        1           body->world orientation (scalar last), kept
``acc x/y/z``           m/s^2       body specific force (IMU; hover +g on z -- unverified)
``vel x/y/z``           m/s         **body-frame** velocity -> world: v_w = R v_b
``pos x/y/z``           m           world position (z up)
``mot 1`` .. ``mot 4``  rad/s       rotor speeds, rotor kind ``rpm`` (rad/s)
======================  ==========  =========================================================

Not read: ``ang acc *``, ``dmot *``, ``vbat``, command columns.
"""

from __future__ import annotations

from pathlib import Path

from scipy.spatial.transform import Rotation

from velobins_common.constants import ROTOR_SPEED
from velobins_data.datasets.errors import DatasetError
from velobins_data.datasets.tabular import monotonic_rows, read_table, require_columns
from velobins_data.flight import STANDARD_GRAVITY, Flight

PLATFORM = "neurobem-quad"
TIME_COLUMN = "t"
GYRO_COLUMNS = ("ang vel x", "ang vel y", "ang vel z")
QUAT_COLUMNS = ("quat x", "quat y", "quat z", "quat w")
ACC_COLUMNS = ("acc x", "acc y", "acc z")
VEL_BODY_COLUMNS = ("vel x", "vel y", "vel z")
POS_COLUMNS = ("pos x", "pos y", "pos z")
MOTOR_COLUMNS = ("mot 1", "mot 2", "mot 3", "mot 4")
REQUIRED_COLUMNS = (TIME_COLUMN, *GYRO_COLUMNS, *QUAT_COLUMNS, *ACC_COLUMNS, *VEL_BODY_COLUMNS, *POS_COLUMNS)


def load_neurobem(path: str | Path) -> Flight:
    """Load one NeuroBEM processed CSV as a :class:`Flight` (module docstring).

    Raises:
        DatasetError: missing column (all listed), not exactly 4 ``mot i`` columns, NaN in a
            used column, unsorted stamps, negative rotor speed.
    """
    source = str(path)
    table = read_table(path)
    require_columns(source, table.columns, REQUIRED_COLUMNS)
    motors = [c for c in table.columns if c.startswith("mot ")]
    if tuple(motors) != MOTOR_COLUMNS:
        raise DatasetError(source, "mot *", f"expected rotor columns {list(MOTOR_COLUMNS)}, found {motors}")
    t_all = table.get([TIME_COLUMN])[:, 0]
    keep = monotonic_rows(source, t_all, TIME_COLUMN)
    rotor = table.get(MOTOR_COLUMNS)[keep]
    if (rotor < 0).any():
        row, col = (int(x) for x in next(iter(zip(*(rotor < 0).nonzero(), strict=True))))
        raise DatasetError(source, MOTOR_COLUMNS[col], "negative rotor speed [rad/s]", int(keep[row]))
    q = table.get(QUAT_COLUMNS)[keep]
    v_body = table.get(VEL_BODY_COLUMNS)[keep]
    return Flight(
        name=Path(path).stem,
        t=t_all[keep],
        acc=table.get(ACC_COLUMNS)[keep],
        gyro=table.get(GYRO_COLUMNS)[keep],
        rotor=rotor,
        rotor_kind=ROTOR_SPEED,
        p=table.get(POS_COLUMNS)[keep],
        q=q,
        v=Rotation.from_quat(q).apply(v_body),
        metadata={
            "dataset": "neurobem",
            "platform": PLATFORM,
            "source": source,
            "gravity": STANDARD_GRAVITY,
            "dropped_stamps": len(t_all) - len(keep),
        },
    )
