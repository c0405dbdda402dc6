"""The cache: keys, the entry format, the tiers (memory, disk, shared) and the
machinery that keeps identical requests from running the engine twice.

Modules, lowest first: :mod:`.keys` (what a key is made of), :mod:`.entry` (one result
and its byte format), :mod:`.diskutil` (private on-disk stores), :mod:`.lru` (byte-bounded
memory), :mod:`.store` (the disk tier), :mod:`.tiers` (lookup across tiers),
:mod:`.leases` and :mod:`.singleflight` (per-key locks across processes and replicas,
one leader per key in a process), :mod:`.writer` (write-behind), and :mod:`.production`,
the one owner of a missing key's production: one engine run per key across threads,
processes and replicas, stored before its lease is let go.
"""
