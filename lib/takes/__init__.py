"""Approved takes (issue 22): operators render a few takes of a phrase (the same
request under distinct seeds), approve one, and every request of the phrase that names
no seed is answered that take, until they change it.

- :mod:`lib.takes.records`: the phrase id and the approval record, and its file;
- :mod:`lib.takes.book`: the approvals in memory (the hit path's one dict lookup), on
  disk, pinned in the store, copied beside it, shared through Redis;
- :mod:`lib.takes.operations`: the service's ``takes`` part: render takes, approve,
  withdraw, list, and the approved take's entry for the request path.

Importing this package imports nothing: the request path imports only the records.
"""
