"""Calibrations: create, lock, their comparisons, their results, the latest noise of a
testbed (the SAME bands of its series)."""

from __future__ import annotations

from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session

from mallard_api.models.calibrations import Calibration, CalibrationResult
from mallard_api.models.comparisons import Comparison
from mallard_api.models.testbeds import Testbed
from mallard_api.schemas.calibrations import SeriesNoise


def create(session: Session, c: Calibration) -> Calibration:
    session.add(c)
    session.flush()
    session.refresh(c)
    return c


def get(session: Session, calibration_id: int) -> Calibration | None:
    return session.get(Calibration, calibration_id)


def lock(session: Session, calibration_id: int) -> Calibration | None:
    return session.scalar(select(Calibration).where(Calibration.id == calibration_id)
                          .with_for_update().execution_options(populate_existing=True))


def testbed(session: Session, testbed_id: int) -> Testbed | None:
    return session.get(Testbed, testbed_id)


def testbed_id_of(session: Session, fingerprint: str) -> int | None:
    return session.scalar(select(Testbed.id).where(Testbed.fingerprint == fingerprint))


def comparisons(session: Session, calibration_id: int) -> list[Comparison]:
    return list(session.scalars(select(Comparison).where(
        Comparison.calibration_id == calibration_id).order_by(Comparison.id)))


def replace_results(session: Session, calibration_id: int,
                    rows: list[CalibrationResult]) -> None:
    """The calibration's results, once: whatever an earlier try stored is replaced (the
    table's unique key keeps a row per testbed x workload x params x measure)."""
    session.execute(delete(CalibrationResult).where(
        CalibrationResult.calibration_id == calibration_id))
    for r in rows:
        r.calibration_id = calibration_id
        session.add(r)
    session.flush()


def results(session: Session, calibration_id: int) -> list[CalibrationResult]:
    return list(session.scalars(select(CalibrationResult).where(
        CalibrationResult.calibration_id == calibration_id).order_by(
        CalibrationResult.workload, CalibrationResult.threads, CalibrationResult.measure,
        CalibrationResult.id)))


LATEST_SQL = text("""
SELECT DISTINCT ON (r.workload, r.params, r.measure)
       r.calibration_id, r.workload, r.params, r.threads, r.measure, r.cv_pct,
       r.aa_comparisons, r.false_alarms, r.aa_unknown, r.false_alarm_rate, r.detection,
       r.band_pct, c.finished_at
FROM calibration_results r
JOIN calibrations c ON c.id = r.calibration_id AND c.state = 'done'
WHERE r.testbed_fingerprint = :fp
ORDER BY r.workload, r.params, r.measure, c.finished_at DESC, r.calibration_id DESC
""")


def latest_noise(session: Session, fingerprint: str) -> list[SeriesNoise]:
    """Per series of the testbed, the row of its latest finished calibration."""
    return [SeriesNoise.model_validate(dict(r))
            for r in session.execute(LATEST_SQL, {"fp": fingerprint}).mappings()]
