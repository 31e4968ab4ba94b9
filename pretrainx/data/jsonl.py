"""Records of a JSON-lines file of the user's (pairs, a retrieval corpus), read whole,
with a bad line named by its file and number."""

import json

from pretrainx.errors import UserError


def records(path: str, fields: tuple, optional: tuple = ()) -> list:
    """[{field: value}] of every non-empty line: `fields` must be there, `optional` ones
    are "" where absent or empty; a line that is not such an object stops in one line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                out.append({**{k: record[k] for k in fields},
                            **{k: record.get(k) or "" for k in optional}})
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                raise UserError(f"{path} line {line_no}: not a JSON object with "
                                f"{', '.join(fields)} ({type(e).__name__}: {e})") from None
    return out
