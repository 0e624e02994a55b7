"""Autotuning: the tuning database (records of every trial) and the device identity that keys it."""
from septran.tuning.db import TuningDB, best_of, default_db
from septran.tuning.device import device_identity, device_label, device_string
from septran.tuning.key import TuningKey
from septran.tuning.record import STATUSES, Timing, TuningRecord, point_id

__all__ = [
    "TuningDB", "TuningKey", "TuningRecord", "Timing", "STATUSES",
    "best_of", "default_db", "point_id", "device_identity", "device_label", "device_string",
]
