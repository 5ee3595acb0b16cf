// PLACEHOLDER: replaced by the real view.
import { header } from "../ui.js";

export default {
  id: "channels",
  title: "Channels",
  icon: "channels",
  mount(container) {
    container.append(header("Channels"));
    return () => {};
  },
};
