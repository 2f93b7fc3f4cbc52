"""The experiment lab: sweeps of engine knobs over a workload (sources, ready experiments,
the background worker, storage, export) and a sweep point opened as a session."""
