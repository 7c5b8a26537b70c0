"""A flight's batch, the outputs its samplers need, and where its placeholders' tokens come
from (runner/engine/flight.py), over real requests in slots."""

from __future__ import annotations

from types import SimpleNamespace

from runner.engine.flight import PLACEHOLDER, Entry, Flight
from runner.engine.request import Active, Request
from runner.engine.slots import Slot
from runner.sample import SamplingOptions


def sequence(seq: int, temperature: float = 0.0, logprobs: bool = False,
             suppressed: tuple = ()) -> Active:
    """suppressed: the model's ids never drawn (its vocabulary's, all the sampler reads)."""
    request = Request([1, 2, 3], lambda event: None, SamplingOptions(temperature=temperature),
                      logprobs=logprobs)
    vocab = SimpleNamespace(suppressed=suppressed)
    return Active(request, Slot(seq), 0, tokenizer=SimpleNamespace(vocab=vocab))


def launched(flight: Flight, writes_chain: bool = True) -> Flight:
    flight.step = SimpleNamespace(writes_chain=writes_chain)     # what chain_from reads
    return flight


def test_a_flight_holds_its_entries_rows_and_the_least_its_samplers_need():
    a, b = sequence(0), sequence(3)
    flight = Flight.of([Entry(a, 5, [PLACEHOLDER], rows=1, sampled=True),
                        Entry(b, 0, [7, 8, 9], rows=1)])
    batch = flight.batch
    assert batch.tokens.tolist() == [0, 7, 8, 9]                 # the placeholder as 0
    assert batch.positions.tolist() == [5, 0, 1, 2] and batch.seqs.tolist() == [0, 3, 3, 3]
    assert batch.outputs.tolist() == [0, 3] and flight.output_rows == [0, 1]
    assert flight.needs == "choices" and flight.items == [PLACEHOLDER, 7, 8, 9]
    assert flight.sampled_rows() == {id(a): (flight.entries[0], 0)}
    sampled = Flight.of([Entry(a, 5, [4], rows=1), Entry(sequence(1, 0.8), 0, [5], rows=1)])
    assert sampled.needs == "candidates"
    logits = Flight.of([Entry(sequence(2, logprobs=True), 0, [4], rows=1)])
    assert logits.needs == "logits"
    prefill = Flight.of([Entry(a, 0, [4, 5], rows=0)])         # a prompt chunk, no output
    assert prefill.batch.outputs.tolist() == [1] and prefill.output_rows == []


def test_placeholders_take_the_last_flights_choices_only_where_all_of_them_can():
    a, b, c = sequence(0), sequence(1), sequence(2)
    last = launched(Flight.of([Entry(a, 9, [4], rows=1), Entry(b, 3, [5], rows=1)]))
    both = Flight.of([Entry(b, 4, [PLACEHOLDER], 1, sampled=True), Entry(c, 0, [6, 7], 1),
                      Entry(a, 10, [PLACEHOLDER], 1, sampled=True)])
    assert both.chain_from(last) == [1, -1, -1, 0]         # b is last's row 1, a its row 0
    one = Flight.of([Entry(a, 10, [PLACEHOLDER], 1, sampled=True)])
    assert one.chain_from(last) is None                    # b's token would not be read
    b.done = True
    assert one.chain_from(last) == [0]                     # unless b has ended
    assert one.chain_from(launched(last, writes_chain=False)) is None
    sampled = launched(Flight.of([Entry(a, 9, [4], 1), Entry(sequence(3, 0.8), 0, [5], 1)]))
    assert sampled.needs == "candidates" and one.chain_from(sampled) is None


def test_a_greedy_sequence_of_a_model_that_suppresses_tokens_reads_candidates():
    """A device's argmax may be a suppressed token: its largest CANDIDATES logits are read
    instead (the sampler drops the suppressed ones), or all of them where those could all
    be suppressed; its choices are never chained on."""
    assert Flight.of([Entry(sequence(0, suppressed=(5,)), 0, [4], rows=1)]).needs == \
        "candidates"
    assert Flight.of([Entry(sequence(0, suppressed=tuple(range(64))), 0, [4], rows=1)]
                     ).needs == "logits"
