"""A deterministic synthetic NYC taxi-fare data set with the seed article's columns.

The fare follows the 2020s NYC metered rules closely enough to be learnable but not trivially linear: a base
fare, a per-mile rate, a per-minute rate whose minutes depend on the hour's traffic speed, rush-hour and
overnight surcharges, the JFK flat fare (rate code 2), the Newark surcharge (rate code 3), tolls on some
airport rides, and noise that grows with the distance.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FEATURES = (
    "passenger_count",
    "trip_distance",
    "pickup_longitude",
    "pickup_latitude",
    "rate_code",
    "dropoff_longitude",
    "dropoff_latitude",
    "hour",
    "day_of_week",
    "is_weekend",
    "h_distance",
)
LABEL = "fare_amount"
JFK = (-73.7781, 40.6413)
EWR = (-74.1745, 40.6895)
EARTH_RADIUS_KM = 6371.0


def haversine_km(lon1: np.ndarray, lat1: np.ndarray, lon2: np.ndarray, lat2: np.ndarray) -> np.ndarray:
    lon1, lat1, lon2, lat2 = (np.radians(a) for a in (lon1, lat1, lon2, lat2))
    a = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(a))


def generate(rows: int, seed: int = 0) -> pd.DataFrame:
    """``rows`` trips; the same ``rows`` and ``seed`` always give the same frame."""
    rng = np.random.default_rng(seed)
    hour = rng.choice(24, size=rows, p=_hour_weights())
    day = rng.integers(0, 7, size=rows)
    weekend = (day >= 5).astype(np.int32)
    passengers = rng.choice([1, 2, 3, 4, 5, 6], size=rows, p=[0.70, 0.14, 0.05, 0.03, 0.05, 0.03])
    rate = rng.choice([1, 2, 3, 5], size=rows, p=[0.93, 0.04, 0.01, 0.02])

    pickup_lon = rng.normal(-73.982, 0.02, rows)
    pickup_lat = rng.normal(40.752, 0.025, rows)
    km = np.clip(rng.lognormal(mean=0.9, sigma=0.65, size=rows), 0.2, 40.0)
    angle = rng.uniform(0, 2 * np.pi, rows)
    dropoff_lon = pickup_lon + km * np.cos(angle) / (111.32 * np.cos(np.radians(pickup_lat)))
    dropoff_lat = pickup_lat + km * np.sin(angle) / 110.57
    for code, (lon, lat) in ((2, JFK), (3, EWR)):
        at = rate == code
        dropoff_lon[at] = lon + rng.normal(0, 0.004, at.sum())
        dropoff_lat[at] = lat + rng.normal(0, 0.004, at.sum())
    h_km = haversine_km(pickup_lon, pickup_lat, dropoff_lon, dropoff_lat)
    miles = h_km / 1.609344 * rng.uniform(1.15, 1.45, rows)

    rush = ((hour >= 7) & (hour <= 9)) | ((hour >= 16) & (hour <= 19))
    night = (hour >= 22) | (hour <= 5)
    speed_mph = np.where(rush & (weekend == 0), 9.0, np.where(night, 20.0, 13.0)) * rng.uniform(0.8, 1.2, rows)
    minutes = miles / speed_mph * 60
    fare = 3.0 + 1.75 * miles + 0.70 * minutes * 0.5
    fare += np.where(rush & (weekend == 0) & (hour >= 16), 2.5, 0.0) + np.where(night, 1.0, 0.0)
    fare = np.where(rate == 2, 70.0, fare)
    fare = np.where(rate == 3, fare + 20.0, fare)
    fare = np.where(rate == 5, fare * rng.uniform(0.8, 1.6, rows), fare)
    tolls = (rate >= 2) & (rng.random(rows) < 0.5)
    fare += np.where(tolls, 6.94, 0.0)
    fare += rng.normal(0.0, 0.3 + 0.04 * miles, rows)
    fare = np.round(np.clip(fare, 3.0, None), 2).astype(np.float64)

    return pd.DataFrame(
        {
            "passenger_count": passengers.astype(np.int32),
            "trip_distance": np.round(miles, 2),
            "pickup_longitude": pickup_lon,
            "pickup_latitude": pickup_lat,
            "rate_code": rate.astype(np.int32),
            "dropoff_longitude": dropoff_lon,
            "dropoff_latitude": dropoff_lat,
            "hour": hour.astype(np.int32),
            "day_of_week": day.astype(np.int32),
            "is_weekend": weekend,
            "h_distance": h_km,
            LABEL: fare,
        }
    )


def _hour_weights() -> np.ndarray:
    w = np.array([3, 2, 1.5, 1, 1, 1.5, 3, 5, 6, 6, 5, 5, 5.5, 5.5, 5.5, 6, 6, 7, 7.5, 7, 6.5, 6, 5, 4], dtype=float)
    return w / w.sum()


def write(out_dir: str, train_rows: int, eval_rows: int, seed: int = 0) -> None:
    """Write ``train.parquet`` and ``eval.parquet`` (independent draws: different seeds)."""
    from pathlib import Path

    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    generate(train_rows, seed).to_parquet(path / "train.parquet", index=False)
    generate(eval_rows, seed + 1).to_parquet(path / "eval.parquet", index=False)
