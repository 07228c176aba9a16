// Keyboard shortcuts of orbitscope's labelling view (/label/): i, b, n, s, p click the buttons
// Invariant, Borderline, Not invariant, Skip and Previous. Keys typed into a field (the rater
// name, the invariance dropdown) are left alone, as are keys with Ctrl/Alt/Meta and held-down
// repeats. While the page waits for the server's answer to a label (Dash marks the updating
// components), keys are ignored: a key labels the model on screen, never one not yet shown.
(function () {
    "use strict";
    var BUTTONS = {
        i: "label-invariant",
        b: "label-borderline",
        n: "label-not-invariant",
        s: "label-skip",
        p: "label-previous"
    };
    var FIELDS = "input, textarea, select, [contenteditable], [role='combobox'], [role='listbox'], " +
        "[role='option'], [role='searchbox'], .dash-dropdown, .Select";

    function inField(el) {
        if (!el || el === document.body || !el.closest) {
            return false;
        }
        return el.isContentEditable || el.closest(FIELDS) !== null;
    }

    function busy() {
        return document.querySelector("#model-title[data-dash-is-loading='true'], " +
            "#progress[data-dash-is-loading='true']") !== null;
    }

    document.addEventListener("keydown", function (event) {
        if (event.ctrlKey || event.altKey || event.metaKey || event.repeat || event.defaultPrevented) {
            return;
        }
        var id = BUTTONS[(event.key || "").toLowerCase()];
        if (!id || inField(event.target) || inField(document.activeElement)) {
            return;
        }
        var button = document.getElementById(id);
        if (!button) {
            return;
        }
        event.preventDefault();
        if (!busy()) {
            button.click();
        }
    });
}());
