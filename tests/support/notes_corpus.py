"""Fourteen real-shaped long documents, written by the tests: discharge-note style, three services.

The documents have the formatting real notes carry and a toy corpus lacks: section headers in
capitals, tab-separated vitals, numbered medication lists, bracketed de-identification markers
(``[** … **]``), non-ASCII quotes, dashes and units, a byte-order mark, Windows line ends, one
document far longer than the model's ``max_length`` and one shorter than its attention window, a
pasted portal message that spells special tokens (``[CLS]``, ``<s>`` …, :data:`PORTAL`) beside
Chinese and emoji the vocabulary cannot spell, a third class with two notes only (a 1 : 3.5
imbalance) that the tests' classifier never predicts, and hostile text (tests/support/hostile_corpus.py) as
that class's name, as a note's id and file name, and in that note's text.

:func:`write_notes` writes them twice — as one CSV (with its own ``split`` column whose test part
holds a single class) and as one folder of ``.txt`` files per class (file names with spaces and
double underscores) — so a test can run the pipeline on both, as a user with such data would.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

from tests.support.hostile_corpus import HOSTILE_CLASS, HOSTILE_ID

#: The folders run's targets (tests/e2e/test_real_data.py): the predictions (and the data they read), and study 3's pair
#: shards: 4 for the 3 test pairs of the smallest synthetic pair set (6 pairs, half of them held out).
PAIR_SHARDS = 4
FOLDERS_TARGETS = (
    "results/predictions/selection.json",
    *(f"results/pairs/scores_shard{k}.parquet" for k in range(PAIR_SHARDS)),
)
#: The three classes, in label order (folder names of the folders source); the third is named by hostile text.
SERVICES = ("cardiology", "oncology", HOSTILE_CLASS)
#: The file name (and note id) of test note 2: hostile text, shown in every page, table and figure title.
HOSTILE_NOTE = f"{HOSTILE_ID}__cardiology"
#: The second line of test note 2: markup, a template, a LaTeX command and a spreadsheet formula.
HOSTILE_LINE = (
    "<script>alert('text')</script> <img src=x onerror=alert(1)> {{7*7}} \\input{/etc/passwd} =cmd|' /C calc'!A0"
)
#: The first line of test note 2: a message pasted from a patient portal, spelling every special token.
PORTAL = (
    "Portal message: [CLS] start [SEP] middle [PAD] [PAD] [MASK] [UNK] <s> </s> <pad> <mask> "
    "胸痛 since Monday 😀 thanks"
)

EVIDENCE_PHRASES = {
    "cardiology": [
        "atrial fibrillation with rapid ventricular response",
        "troponin peaked at 2.3 ng/mL",
        "echocardiogram showed an ejection fraction of 35 %",
        "started on metoprolol 25 mg twice daily",
        "cardiac catheterization revealed a 90 % LAD stenosis",
        "chest pain radiating to the left arm",
    ],
    "oncology": [
        "biopsy confirmed metastatic adenocarcinoma",
        "cycle 3 of FOLFOX chemotherapy was given",
        "neutropenic fever with ANC of 300",
        "CT showed progression of the hepatic lesions",
        "palliative radiation to the spine — 20 Gy in 5 fractions",
        "tumor board recommended second-line therapy",
    ],
    HOSTILE_CLASS: [
        "MRI showed an acute left MCA infarct",
        "EEG captured focal seizures",
        "tPA was given within 3 hours",
        "lumbar puncture with 40 white cells",
        "levetiracetam 500 mg twice daily",
        "NIHSS improved from 12 to 4",
    ],
}
_FILLER = [
    "The patient tolerated the procedure well and was transferred to the floor in stable condition.",
    "Family was updated at the bedside; the patient’s daughter is the health-care proxy.",
    "Pain was controlled with acetaminophen 650 mg every 6 hours as needed.",
    "Physical therapy evaluated the patient and recommended discharge home with services.",
    "Labs on admission were notable for a creatinine of 1.4 (baseline 1.1) and a potassium of 3.9.",
    "He denies fevers, chills, nausea or vomiting; appetite is “fair”.",
    "Diet: regular, low sodium — 2 g/day.  Activity: as tolerated.",
    "Follow-up with the primary care physician was arranged within 1–2 weeks.",
]


def _note(service: str, k: int, rng: random.Random, n_paragraphs: int) -> str:
    evidence = EVIDENCE_PHRASES[service]
    date = f"[**2101-{rng.randint(1, 12)}-{rng.randint(1, 28)}**]"
    lines = [
        f"Admission Date:  {date}              Discharge Date:   [**2101-{rng.randint(1, 12)}-{rng.randint(1, 28)}**]",
        "",
        f"Service: {service.upper()}",
        "",
        "HISTORY OF PRESENT ILLNESS:",
        f"Mr. [**Known lastname {1000 + k}**] is a {rng.randint(45, 85)}-year-old man admitted with "
        f"{rng.choice(evidence)}. {rng.choice(_FILLER)}",
        "",
        "VITALS ON ADMISSION:",
        f"T\t{36 + rng.random():.1f} °C\tBP\t{rng.randint(100, 160)}/{rng.randint(60, 95)}\tHR\t{rng.randint(55, 120)}",
        "",
        "MEDICATIONS ON ADMISSION:",
        *(
            f"{i}. {drug}"
            for i, drug in enumerate(
                rng.sample(
                    [
                        "Aspirin 81 mg daily",
                        "Lisinopril 10 mg daily",
                        "Ondansetron 4 mg q8h prn",
                        "Atorvastatin 40 mg qhs",
                        "Dexamethasone 4 mg daily",
                        "Pantoprazole 40 mg daily",
                    ],
                    3,
                ),
                start=1,
            )
        ),
        "",
        "HOSPITAL COURSE:",
    ]
    for _ in range(n_paragraphs):
        sentences = [rng.choice(_FILLER) for _ in range(4)]
        sentences.insert(rng.randrange(5), f"Notably, {rng.choice(evidence)}.")
        lines += ["\t" + " ".join(sentences), ""]
    lines += [
        "DISCHARGE DIAGNOSIS:",
        f"1. {rng.choice(evidence).capitalize()}",
        "",
        f"[** Attending {k} **] — dictated",
    ]
    return "\n".join(lines)


def notes(seed: int = 0) -> list[dict]:
    """The documents: ``file`` (a name with a space and a double underscore), ``service``, ``text``, ``split``.

    Seven cardiology, five oncology and two neurology notes; the CSV's own split puts three cardiology notes
    in the test part (no oncology or neurology note: classes absent from the test split). Note 0 is ~6 times
    ``max_length`` of the tiny configuration, note 1 is one line (shorter than the attention window), note 2
    starts with :data:`PORTAL`.
    """
    rng = random.Random(seed)
    out = []
    for k in range(14):
        service = SERVICES[0] if k < 7 else SERVICES[1] if k < 12 else SERVICES[2]
        if k == 1:
            text = "Brief note — seen in clinic, “stable”; [**Hospital 3**] follow-up."
        else:
            text = _note(service, k, rng, n_paragraphs=18 if k == 0 else rng.randint(2, 4))
        if k == 2:
            text = PORTAL + "\n" + HOSTILE_LINE + "\n" + text
        file = HOSTILE_NOTE if k == 2 else f"note {k:02d}__{service}"
        out.append({"file": file, "service": service, "text": text, "split": "test" if k in (0, 1, 2) else "train"})
    return out


def write_notes(folder: Path, seed: int = 0) -> tuple[Path, Path]:
    """``(<folder>/discharge notes.csv, <folder>/discharge_notes/)``: the same notes as a CSV and as class folders.

    The CSV starts with a byte-order mark and ends its rows with CRLF; its ``label`` column holds the
    service index and ``note_id`` the file name. The folder source's files start with a byte-order mark
    too (one of them) and use CRLF line ends (every other one).
    """
    docs = notes(seed)
    folder.mkdir(parents=True, exist_ok=True)
    table = folder / "discharge notes.csv"
    with open(table, "w", encoding="utf-8-sig", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\r\n")
        writer.writerow(["note_id", "text", "label", "split"])
        for d in docs:
            writer.writerow([d["file"], d["text"].replace("\n", "\r\n"), SERVICES.index(d["service"]), d["split"]])
    root = folder / "discharge_notes"
    for k, d in enumerate(docs):
        path = root / d["service"] / f"{d['file']}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = d["text"].replace("\n", "\r\n") if k % 2 else d["text"]
        path.write_text(text, encoding="utf-8-sig" if k == 3 else "utf-8", newline="")
    return table, root
