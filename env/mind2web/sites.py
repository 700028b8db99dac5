"""The synthetic websites of the Mind2Web generator: who they are and what their forms ask.

Owns the catalogue only (no page building): each `Site` has a website name, an official-style
domain and subdomain, the task verb, its form fields (typed or selected) and its result items.
Sites are split as the official test sets are: `TRAIN_SITES` also serve test_task (new tasks on
seen websites), `HELDOUT_SITES` serve test_website (unseen websites of seen domains) and
`DOMAIN_SITES` serve test_domain (domains absent from training).
"""

from __future__ import annotations

from dataclasses import dataclass

CITIES = ("Boston", "Denver", "Chicago", "Seattle", "Austin", "Miami", "Atlanta", "Portland",
          "New York", "San Diego", "Phoenix", "Dallas")
DATES = ("April 12", "May 3", "June 21", "July 8", "August 30", "September 14")


@dataclass(frozen=True)
class FormField:
    """A form control: `kind` is "TYPE" (a textbox) or "SELECT" (a combobox)."""

    label: str
    kind: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Site:
    website: str
    domain: str
    subdomain: str
    verb: str
    fields: tuple[FormField, ...]
    results: tuple[str, ...]
    submit: str = "Search"


def _t(label: str, values: tuple[str, ...]) -> FormField:
    return FormField(label, "TYPE", values)


def _s(label: str, values: tuple[str, ...]) -> FormField:
    return FormField(label, "SELECT", values)


_FLIGHT = (_t("From", CITIES), _t("To", CITIES), _s("Cabin class", ("Economy", "Business",
           "First")), _s("Passengers", ("1", "2", "3", "4")), _t("Departure date", DATES))
_CAR = (_t("Pick-up location", CITIES), _t("Pick-up date", DATES),
        _s("Car type", ("Compact", "SUV", "Minivan", "Luxury")), _t("Drop-off date", DATES))
_HOTEL = (_t("Destination", CITIES), _t("Check-in", DATES), _s("Rooms", ("1", "2", "3")),
          _s("Guests", ("1", "2", "3", "4", "5")))
_STORE = (_t("Search products", ("running shoes", "desk lamp", "coffee maker", "backpack",
                                 "wireless mouse", "yoga mat")),
          _s("Sort by", ("Price: low to high", "Best selling", "Newest")),
          _s("Size", ("S", "M", "L", "XL")), _t("Zip code", ("02139", "80202", "60601", "98101")))
_CARS = (_s("Make", ("Toyota", "Honda", "Ford", "Subaru")), _s("Max price", ("$15,000",
         "$25,000", "$35,000")), _t("Zip code", ("02139", "80202", "60601")))
_MOVIES = (_t("Search movies", ("Dune", "Arrival", "Inception", "Up")), _t("City", CITIES),
           _s("Showtime", ("Today", "Tomorrow", "This weekend")))
_SPORTS = (_s("League", ("NBA", "NFL", "MLB", "NHL")), _t("Team", ("Celtics", "Broncos", "Cubs",
           "Kraken")), _s("Season", ("2022", "2023")))
_RECIPES = (_t("Search recipes", ("lasagna", "pad thai", "banana bread", "chili")),
            _s("Diet", ("Vegetarian", "Vegan", "Gluten free")), _s("Time", ("Under 30 min",
            "Under 1 hour")))
_DMV = (_s("Service", ("License renewal", "Vehicle registration", "Road test")),
        _t("Zip code", ("02139", "80202", "60601")), _t("Preferred date", DATES))

TRAIN_SITES = (
    Site("united", "Travel", "Airlines", "Find flights", _FLIGHT, ("UA 512", "UA 88", "UA 1204")),
    Site("budget", "Travel", "Car rental", "Rent a car", _CAR, ("Toyota Corolla", "Ford Escape")),
    Site("marriott", "Travel", "Hotel", "Book a hotel", _HOTEL, ("Courtyard Downtown",
         "Residence Inn", "JW Marriott")),
    Site("target", "Shopping", "General", "Shop for", _STORE, ("Item 1", "Item 2", "Item 3")),
    Site("carmax", "Shopping", "Auto", "Find a used car", _CARS, ("2019 Civic", "2020 Camry")),
    Site("amc", "Entertainment", "Movies", "Find showtimes", _MOVIES, ("7:00 PM", "9:30 PM")),
)
HELDOUT_SITES = (
    Site("delta", "Travel", "Airlines", "Book a flight", _FLIGHT, ("DL 101", "DL 2290")),
    Site("ikea", "Shopping", "General", "Browse", _STORE, ("Product A", "Product B")),
)
DOMAIN_SITES = (
    Site("espn", "Info", "Sports", "Look up", _SPORTS, ("Schedule", "Standings", "Roster")),
    Site("allrecipes", "Info", "Cooking", "Find a recipe for", _RECIPES, ("Top rated",
         "Quick pick")),
    Site("dmv", "Service", "Government", "Book an appointment for", _DMV, ("Slot 1", "Slot 2"),
         submit="Continue"),
)
SPLIT_SITES = {"train": TRAIN_SITES, "test_task": TRAIN_SITES,
               "test_website": HELDOUT_SITES, "test_domain": DOMAIN_SITES}
