#!/usr/bin/python3
"""Writes the two small tables the CSV examples train on (synthetic, so
that they may be shipped): houses.csv, a price that is a linear function of
four columns plus noise (csv_regression.star), and penguins.csv, three
species told apart by four measurements, with a text column the model does
not read (csv_classes.star).

    /usr/bin/python3 scripts/examples/tables/gen_tables.py
"""
import csv, os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(30)

# houses.csv: 400 rows.
n = 400
area = rng.uniform(30, 200, n)
rooms = rng.integers(1, 7, n)
age = rng.uniform(0, 80, n)
dist = rng.uniform(0.5, 30, n)
price = 40 + 2.1 * area + 12 * rooms - 0.9 * age - 3.5 * dist + rng.normal(0, 15, n)
with open(os.path.join(HERE, "houses.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["area_m2", "rooms", "age_years", "distance_km", "price_k"])
    for r in zip(area, rooms, age, dist, price):
        w.writerow(["%.1f" % r[0], r[1], "%.1f" % r[2], "%.2f" % r[3], "%.1f" % r[4]])

# penguins.csv: 100 rows of each species, shuffled.
species = {  # bill length, bill depth, flipper length (mm), body mass (g): means
    "Adelie": (38.8, 18.3, 190.0, 3700.0),
    "Chinstrap": (48.8, 18.4, 195.8, 3730.0),
    "Gentoo": (47.5, 15.0, 217.2, 5080.0),
}
sd = (2.6, 1.1, 6.5, 450.0)
islands = {"Adelie": ["Torgersen", "Biscoe", "Dream"], "Chinstrap": ["Dream"], "Gentoo": ["Biscoe"]}
rows = []
for name, mu in species.items():
    for _ in range(100):
        v = [m + s * rng.normal() for m, s in zip(mu, sd)]
        island = islands[name][rng.integers(len(islands[name]))]
        rows.append(["%.1f" % v[0], "%.1f" % v[1], "%.0f" % v[2], "%.0f" % v[3], island + ", Antarctica", name])
rows = [rows[i] for i in rng.permutation(len(rows))]
with open(os.path.join(HERE, "penguins.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "island", "species"])
    w.writerows(rows)
