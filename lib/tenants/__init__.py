"""Tenants: API keys, their limits, and what each caller used.

A caller is the admin (the admin token: no limits), a tenant (``Authorization: Bearer
<key>`` with a key made by ``POST /api/keys``), or anonymous (no key: the limits of
``tenants.anonymous_*``, counted per client address). The HTTP boundary names the
caller's :class:`Account` for the request (:func:`acting`); the service asks it before
any engine work (:meth:`Tenants.admit_miss`) and tells it what was answered
(:meth:`Tenants.record`). Keys and counters live in the cache directory (0600), or in the
shared tier (Redis) when one is configured, so that limits hold across replicas.
"""

from __future__ import annotations

from lib.tenants.book import Account, MissTicket, Tenants, acting, current_account
from lib.tenants.records import ANONYMOUS, Limits, TenantRecord

__all__ = ["ANONYMOUS", "Account", "Limits", "MissTicket", "TenantRecord", "Tenants", "acting", "current_account"]
