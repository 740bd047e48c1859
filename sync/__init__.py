"""The merge boundary: keys, signed changes, trust, verification and quarantine, sync.

Empty until the signed-changes work lands; the package exists so the distribution layout is final.
"""

__all__: list[str] = []
