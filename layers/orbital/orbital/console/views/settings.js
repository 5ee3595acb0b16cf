// PLACEHOLDER: replaced by the real view.
import { header } from "../ui.js";

export default {
  id: "settings",
  title: "Settings",
  icon: "settings",
  mount(container) {
    container.append(header("Settings"));
    return () => {};
  },
};
