"""The variants' colours, one source for the figures (`toyrl.plots`) and the page (`toyrl.explore`
ships them in its data): the article's four fixed, every other variant the Okabe-Ito colours in
order, the yellow left out (too light for a line on white)."""

VARIANT_COLOURS = {
    "grpo": "#D55E00",  # vermillion
    "std_only": "#E69F00",  # orange
    "length_only": "#CC79A7",  # reddish purple
    "dr_grpo": "#0072B2",  # blue
}
EXTRA_COLOURS = ["#009E73", "#56B4E9", "#000000", "#D55E00", "#E69F00", "#CC79A7", "#0072B2"]
